"""/logs/: the node's /var/log, directories as a list of links and files as they are.

Nothing outside the log directory is reachable: a path with a `..` segment (however it is
encoded) is refused, and the resolved path (symlinks followed) must still be inside it.
"""

from __future__ import annotations

import html
import os
from urllib.parse import quote, unquote

from aiohttp import web

LOG_ROOT = "/var/log"


class Refused(Exception):
    pass


def resolve(root: str, relative: str) -> str:
    """The real path of `relative` under root, or Refused if it would leave root."""
    parts = unquote(relative).split("/")
    if any(p in ("..", ".") for p in parts) or "\x00" in relative:
        raise Refused(relative)
    real_root = os.path.realpath(root)
    real = os.path.realpath(os.path.join(real_root, *[p for p in parts if p]))
    if real != real_root and not real.startswith(real_root + os.sep):
        raise Refused(relative)
    return real


def listing(path: str) -> str:
    entries = []
    for entry in sorted(os.scandir(path), key=lambda e: e.name):
        name = entry.name + ("/" if entry.is_dir() else "")
        entries.append(f'<a href="{quote(name)}">{html.escape(name)}</a>\n')
    return "<!doctype html>\n<meta name=\"viewport\" content=\"width=device-width\">\n<pre>\n" + "".join(entries) \
        + "</pre>\n"


async def handle(request: web.Request, root: str = LOG_ROOT) -> web.StreamResponse:
    raw = request.raw_path.split("?", 1)[0]
    relative = raw[len("/logs/"):] if raw.startswith("/logs/") else ""
    try:
        path = resolve(root, relative)
    except Refused:
        return web.Response(status=403, text="403 Forbidden: the path leaves the node's log directory\n")
    if os.path.isdir(path):
        if relative and not relative.endswith("/"):
            raise web.HTTPMovedPermanently(location=request.path + "/")
        try:
            return web.Response(text=listing(path), content_type="text/html")
        except OSError as e:
            return web.Response(status=500, text=f"cannot list the directory: {e.strerror}\n")
    if not os.path.isfile(path):
        return web.Response(status=404, text="404 page not found\n")
    return web.FileResponse(path, headers={"Content-Type": "text/plain; charset=utf-8"})
