"""The listener hands upgrade requests to the relay and everything else to the HTTP app; the relay
sends the runtime's URL path with the client's headers (no credentials) and splices bytes both ways.
A fake runtime (a CRI stub and a loopback echo server) stands in for containerd."""

from __future__ import annotations

import asyncio
import ssl

from aiohttp import web

from pykubelet.api.pod import parse_pod
from pykubelet.config import Settings
from pykubelet.server import kubelet_api
from pykubelet.server.host import Host


class FakeCRI:
    def __init__(self, url: str):
        self.url, self.calls = url, []

    async def exec(self, cid, cmd, **streams):
        self.calls.append(("exec", cid, cmd, streams))
        return self.url


async def fake_streaming_server(seen: list[bytes]):
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        seen.append(head)
        writer.write(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n")
        while data := await reader.read(1024):
            writer.write(data.upper())  # the "protocol": echo in capitals
            await writer.drain()
        writer.close()
    return await asyncio.start_server(serve, "127.0.0.1", 0)


def pod():
    p = parse_pod({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
                   "spec": {"containers": [{"name": "main", "image": "busybox"}]}}, "test")
    status = {"phase": "Running", "containerStatuses": [{"name": "main", "containerID": "containerd://c1",
                                                         "state": {"running": {}}}]}
    return p, status


async def open_client(port: int):
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    return await asyncio.open_connection("127.0.0.1", port, ssl=context)


async def test_exec_is_relayed_byte_for_byte_and_plain_paths_reach_the_app(tmp_path):
    seen: list[bytes] = []
    backend = await fake_streaming_server(seen)
    url = f"http://127.0.0.1:{backend.sockets[0].getsockname()[1]}/exec/TOKEN"
    settings = Settings(node_name="n1", root_dir=str(tmp_path))
    settings.server.address, settings.server.port = "127.0.0.1", 0
    settings.authn.anonymous_enabled, settings.authn.webhook_enabled = True, False  # the token is ignored
    settings.authz.mode = "AlwaysAllow"
    cri = FakeCRI(url)
    api = await kubelet_api.start(Host(settings, cri, ["127.0.0.1"], lambda: [pod()], {"syncloop": lambda: True}))
    try:
        reader, writer = await open_client(api.port)
        writer.write(b"POST /exec/ns/p/main?command=sh&command=-c&input=1&output=1&tty=1&error=1 HTTP/1.1\r\n"
                     b"Host: node\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
                     b"X-Stream-Protocol-Version: v4.channel.k8s.io\r\nAuthorization: Bearer secret\r\n\r\n")
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101 ")
        writer.write(b"frames\x00\xff")
        assert await reader.readexactly(8) == b"FRAMES\x00\xff"
        writer.close()
        assert cri.calls == [("exec", "c1", ["sh", "-c"], {"tty": True, "stdin": True, "stdout": True,
                                                           "stderr": False})]
        assert seen[0].startswith(b"POST /exec/TOKEN HTTP/1.1\r\n")
        assert b"X-Stream-Protocol-Version: v4.channel.k8s.io" in seen[0] and b"secret" not in seen[0]

        reader, writer = await open_client(api.port)
        writer.write(b"POST /exec/ns/ghost/main?output=1 HTTP/1.1\r\nHost: node\r\n\r\n")
        answer = await reader.read()
        assert answer.startswith(b"HTTP/1.1 404 ") and answer.endswith(b"pod does not exist")

        reader, writer = await open_client(api.port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n")
        answer = await reader.read()
        assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"ok")
    finally:
        await api.close()
        backend.close()


async def test_streams_need_credentials_too(tmp_path):
    settings = Settings(node_name="n1", root_dir=str(tmp_path))
    settings.server.address, settings.server.port = "127.0.0.1", 0
    api = await kubelet_api.start(Host(settings, FakeCRI(""), [], lambda: [pod()]))
    try:
        reader, writer = await open_client(api.port)
        writer.write(b"POST /exec/ns/p/main?output=1 HTTP/1.1\r\nHost: node\r\nUpgrade: SPDY/3.1\r\n\r\n")
        answer = await reader.read()
        assert answer.startswith(b"HTTP/1.1 401 ") and answer.endswith(b"Unauthorized")
    finally:
        await api.close()


async def test_a_taken_port_is_a_bind_error_naming_the_address(tmp_path):
    settings = Settings(node_name="n1", root_dir=str(tmp_path))
    settings.server.address, settings.server.port = "127.0.0.1", 0
    first = await kubelet_api.start(Host(settings, FakeCRI(""), [], lambda: []))
    settings.server.port = first.port
    try:
        try:
            await kubelet_api.start(Host(settings, FakeCRI(""), [], lambda: []))
        except kubelet_api.BindError as e:
            assert str(e) == f"cannot listen on 127.0.0.1:{first.port} for the kubelet API: already in use"
        else:
            raise AssertionError("expected BindError")
    finally:
        await first.close()
