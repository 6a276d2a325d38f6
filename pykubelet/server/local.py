"""The node's local endpoints: /healthz (is the agent working?) on the healthz port, and /pods
(what it runs) and /debug (what it did and how it is) on a unix socket only root can use.

/healthz (and /healthz/<check>) answers 200 "ok" only while the sync machinery is alive, as the
kubelet's does; like the kubelet's port 10248 it serves nothing else, since any local user and any
hostNetwork pod can reach it. Pod specs and the agent's settings are not for them: /pods (what
`pykubelet pods` reads), /debug/pods/<namespace>/<name> (one pod with its status and its step
history, pods/history.py, what `pykubelet explain pod` tells) and /debug/agent (the agent's own
health and effective settings, what `pykubelet doctor` starts from) are served on
<root-dir>/pykubelet.sock, mode 0600 (util/unix_http.py agent_socket).
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import os
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from aiohttp import web

from pykubelet.config import Settings
from pykubelet.server import connections
from pykubelet.server.front import FrontProtocol, QuietServerLogger
from pykubelet.status.manager import StatusManager

MAX_HEALTHZ_CONNECTIONS = 128
HEALTHZ_KEEPALIVE = 5.0  # seconds an idle /healthz connection stays open


@dataclass(frozen=True)
class Debug:
    """What /debug serves, as callables the agent hands in (the server knows no manager)."""

    history: Callable[[str, str, str], dict[str, Any] | None]
    """(namespace, name, uid) -> the pod's recorded steps, or None."""
    histories: Callable[[], list[dict[str, Any]]]
    """Every pod the history holds (running or recently gone)."""
    agent: Callable[[], dict[str, Any]]
    """The agent's loops, last sync, PLEG relist, network, and its settings (settings_json)."""


def settings_json(settings: Settings) -> dict[str, Any]:
    """The effective settings as plain JSON (every group and field by its attribute name)."""
    return dataclasses.asdict(settings)


def build_healthz_app(health_checks: dict[str, Callable[[], bool]]) -> web.Application:
    async def healthz(request: web.Request) -> web.Response:
        check = request.match_info.get("check", "")
        if check:
            if check not in health_checks:
                return web.Response(status=404, text="404 page not found")
            return web.Response(text="ok") if health_checks[check]() else \
                web.Response(status=500, text=f"internal server error: {check} failed")
        failed = [name for name, check in health_checks.items() if not check()]
        if failed:
            return web.Response(status=500, text=f"[-]{', '.join(failed)} failed\nhealthz check failed\n")
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/healthz/{check}", healthz)
    return app


def build_debug_app(statuses: StatusManager, debug: Debug | None = None) -> web.Application:
    async def pods(_: web.Request) -> web.Response:
        return web.json_response(statuses.pod_list())

    app = web.Application()
    app.router.add_get("/pods", pods)
    if debug is not None:
        _add_debug_routes(app, statuses, debug)
    return app


def _add_debug_routes(app: web.Application, statuses: StatusManager, debug: Debug) -> None:
    async def one_pod(request: web.Request) -> web.Response:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        found = next(((p, s) for p, s in statuses.pods() if (p.namespace, p.name) == (namespace, name)), None)
        obj = None
        if found is not None:
            obj = copy.deepcopy(found[0].raw)
            obj.setdefault("metadata", {}).setdefault("namespace", namespace)
            obj["status"] = found[1]
        history = debug.history(namespace, name, found[0].uid if found else "")
        if obj is None and history is None:
            known = sorted({f"{p.namespace}/{p.name}" for p, _ in statuses.pods()} |
                           {f"{h['namespace']}/{h['name']}" for h in debug.histories()})
            return web.json_response({"error": f"this node has no pod {namespace}/{name}", "pods": known}, status=404)
        return web.json_response({"now": time.time(), "pod": obj, "history": history})

    async def all_pods(_: web.Request) -> web.Response:
        return web.json_response({"now": time.time(), "pods": debug.histories()})

    async def agent(_: web.Request) -> web.Response:
        return web.json_response({"now": time.time(), **debug.agent()})

    app.router.add_get("/debug/pods", all_pods)
    app.router.add_get("/debug/pods/{namespace}/{name}", one_pod)
    app.router.add_get("/debug/agent", agent)


Close = Callable[[], Awaitable[None]]


async def serve_healthz(app: web.Application, host: str, port: int) -> Close:
    """/healthz on host:port, plain HTTP: few connections, short idle times (nobody authenticates here).
    Returns what stops it."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False, keepalive_timeout=HEALTHZ_KEEPALIVE,
                           logger=QuietServerLogger())
    await runner.setup()
    limit = connections.ConnectionLimit(MAX_HEALTHZ_CONNECTIONS)
    try:
        server = await connections.serve(lambda: FrontProtocol(runner.server), host, port, limit)
    except OSError:
        await runner.cleanup()
        raise

    async def close() -> None:
        server.close()
        await runner.cleanup()
    return close


async def serve_socket(app: web.Application, path: str) -> Close:
    """The app on a root-only unix socket at path (replacing one a previous agent left).
    Returns what stops it and removes the socket."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    try:
        sock = await asyncio.to_thread(connections.bind_private_socket, path)
    except OSError:
        await runner.cleanup()
        raise
    await web.SockSite(runner, sock).start()

    async def close() -> None:
        await runner.cleanup()
        await asyncio.to_thread(_remove, path)
    return close


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
