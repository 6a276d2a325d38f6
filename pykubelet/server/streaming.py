"""/exec, /attach and /portForward: the runtime streams, the kubelet API only relays.

As the kubelet does, we ask the runtime over CRI (Exec, Attach, PortForward) for a one-time URL
on its streaming server, send the client's request there (the URL's path, the client's method and
headers, upgrade offer included), and splice the two connections byte for byte until either
side ends. The SPDY/3.1 or WebSocket session inside is between the client and containerd; no
streaming protocol is implemented here. Errors before the upgrade are plain HTTP answers.
"""

from __future__ import annotations

import asyncio
from urllib.parse import parse_qs, urlsplit

from pykubelet.cri import errors
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.runtime import labels
from pykubelet.server.auth import Denied, Gate
from pykubelet.server.front import RequestHead
from pykubelet.server.host import Host, container_id, container_status
from pykubelet.util.log import get_logger

log = get_logger(__name__)

COPY_CHUNK = 64 * 1024
HTTP_REASONS = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
                405: "Method Not Allowed", 429: "Too Many Requests", 500: "Internal Server Error", 503: "Service Unavailable"}
DROPPED_HEADERS = ("Host", "Authorization")  # the runtime's server is on loopback; credentials stay here


class StreamError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


async def write_plain(writer: asyncio.StreamWriter, status: int, body: str) -> None:
    data = body.encode()
    writer.write(f"HTTP/1.1 {status} {HTTP_REASONS.get(status, 'Error')}\r\n"
                 f"Content-Type: text/plain; charset=utf-8\r\nContent-Length: {len(data)}\r\n"
                 f"Connection: close\r\n\r\n".encode() + data)
    await writer.drain()


def _flag(query: dict[str, list[str]], name: str) -> bool:
    return (query.get(name) or [""])[-1].lower() in ("1", "true")


def parse_target(kind: str, path: str) -> tuple[str, str, str, str]:
    """(namespace, pod, uid, container) from /exec|/attach/{ns}/{pod}[/{uid}]/{container} or
    /portForward/{ns}/{pod}[/{uid}]."""
    parts = [p for p in path.split("/")[2:]]
    if kind == "portForward":
        if len(parts) in (2, 3) and all(parts):
            return parts[0], parts[1], parts[2] if len(parts) == 3 else "", ""
    elif len(parts) in (3, 4) and all(parts):
        return parts[0], parts[1], parts[2] if len(parts) == 4 else "", parts[-1]
    raise StreamError(404, "404 page not found")


async def runtime_url(host: Host, kind: str, head: RequestHead) -> str:
    namespace, pod_name, uid, name = parse_target(kind, head.path)
    query = parse_qs(head.query, keep_blank_values=True)
    if kind != "portForward":
        stdin, stdout, stderr, tty = (_flag(query, k) for k in ("input", "output", "error", "tty"))
        if tty and stderr:
            stderr = False  # a terminal has one output stream
        if not (stdin or stdout or stderr):
            raise StreamError(400, "you must specify at least 1 of stdin, stdout, stderr")
    found = host.find_pod(namespace, pod_name, uid)
    if found is None:
        raise StreamError(404, "pod does not exist")
    pod, status = found
    try:
        if kind == "portForward":
            ports = [int(p) for v in query.get("port", []) for p in v.split(",") if p.strip().isdigit()]
            return await host.cri.port_forward(await _sandbox_of(host, pod.uid), ports)
        cs = container_status(status, name)
        if cs is None or not cs.get("containerID"):
            raise StreamError(500, f'container not found ("{name}")')
        cid = container_id(cs["containerID"])
        if kind == "exec":
            return await host.cri.exec(cid, query.get("command", []), tty=tty, stdin=stdin, stdout=stdout,
                                       stderr=stderr)
        return await host.cri.attach(cid, tty=tty, stdin=stdin, stdout=stdout, stderr=stderr)
    except errors.NotFound as e:
        raise StreamError(404, e.details) from None
    except errors.CRIError as e:
        raise StreamError(503 if isinstance(e, errors.Unavailable) else 500, e.details or str(e)) from None


async def _sandbox_of(host: Host, uid: str) -> str:
    """The pod's ready sandbox (pod status does not carry its ID)."""
    ready = [s for s in await host.cri.list_pod_sandbox({labels.POD_UID: uid}) if s.state == api.SANDBOX_READY]
    if not ready:
        raise StreamError(500, "pod sandbox not found or not ready")
    return max(ready, key=lambda s: s.created_at).id


async def handle(host: Host, gate: Gate, head: RequestHead, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
    kind = head.path.split("/")[1]
    try:
        await gate.check(head.method, head.path, head.headers, writer.get_extra_info("peercert"))
    except Denied as e:
        await write_plain(writer, e.status, e.body)
        return
    if not host.settings.server.enable_debugging_handlers:
        await write_plain(writer, 405, "Debug endpoints are disabled.")
        return
    if head.method not in ("GET", "POST"):
        await write_plain(writer, 405, "405: Method Not Allowed")
        return
    try:
        url = urlsplit(await runtime_url(host, kind, head))
    except StreamError as e:
        await write_plain(writer, e.status, e.message)
        return
    try:
        backend_reader, backend_writer = await asyncio.open_connection(url.hostname, url.port or 80)
    except OSError as e:
        await write_plain(writer, 502, f"cannot reach the runtime's streaming server: {e}")
        return
    target = url.path + (f"?{url.query}" if url.query else "")
    lines = [f"{head.method} {target} HTTP/1.1", f"Host: {url.netloc}"]
    lines += [f"{k}: {v}" for k, v in head.headers.items() if k.title() not in DROPPED_HEADERS]
    backend_writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    try:
        await splice(reader, writer, backend_reader, backend_writer)
    finally:
        backend_writer.close()


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(COPY_CHUNK):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass


async def splice(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter,
                 backend_reader: asyncio.StreamReader, backend_writer: asyncio.StreamWriter) -> None:
    """Copy both ways until either direction ends; then both connections close (as the kubelet's
    upgrade proxy does)."""
    up = asyncio.create_task(_copy(client_reader, backend_writer))
    down = asyncio.create_task(_copy(backend_reader, client_writer))
    try:
        await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (up, down):
            task.cancel()
        await asyncio.gather(up, down, return_exceptions=True)
