"""What a client without credentials can hold on the agent's listeners: connections past the cap
are closed on accept, a silent TLS client is dropped after the handshake timeout and a silent
HTTP client after the head timeout, relays are capped, a malformed request is a 400 and one
short log line (not a traceback each), and the root-only socket is mode 0600."""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import socket
import stat
import time

import pytest

from pykubelet.config import Settings
from pykubelet.server import connections, front, kubelet_api, local
from pykubelet.server.host import Host
from pykubelet.util import fdlimit, unix_http
from tests.unit.test_server_relay import FakeCRI, open_client, pod


async def closed_by_server(reader: asyncio.StreamReader, within: float) -> bool:
    try:
        return await asyncio.wait_for(reader.read(), within) == b""
    except ConnectionResetError:
        return True
    except asyncio.TimeoutError:
        return False


@pytest.fixture
async def healthz(monkeypatch):
    """Starts the healthz listener as the agent does, with at most `limit` connections; gives its port."""
    closers = []

    async def start(limit: int) -> int:
        monkeypatch.setattr(local, "MAX_HEALTHZ_CONNECTIONS", limit)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        closers.append(await local.serve_healthz(local.build_healthz_app({"pleg": lambda: True}), "127.0.0.1", port))
        return port
    yield start
    for close in closers:
        await close()


async def get(port: int, request: bytes = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n") -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    try:
        return await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()


async def test_past_the_cap_a_connection_is_closed_at_once_and_a_closed_one_frees_its_place(healthz):
    port = await healthz(limit=3)
    held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    assert await closed_by_server(reader, 2), "the fourth connection should be closed on accept"
    writer.close()
    for r, w in held:
        assert not await closed_by_server(r, 0.1)
    held[0][1].close()
    await held[0][1].wait_closed()

    async def served() -> bool:
        answer = await get(port)
        return answer.startswith(b"HTTP/1.1 200")
    deadline = time.monotonic() + 5
    while not await served():
        assert time.monotonic() < deadline, "a closed connection never freed its place"
        await asyncio.sleep(0.05)
    for _, w in held[1:]:
        w.close()


async def test_a_connection_that_sends_no_request_is_closed_after_the_head_timeout(monkeypatch, healthz):
    monkeypatch.setattr(front, "HEAD_TIMEOUT", 0.3)
    port = await healthz(limit=10)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /healthz HTTP/1.1\r\n")  # and never the end of the head
    assert await closed_by_server(reader, 3)
    writer.close()


async def test_a_malformed_request_is_a_400_and_one_short_line_not_a_traceback_each(caplog, monkeypatch, healthz):
    monkeypatch.setattr(front, "_BAD_HEADS", front.Sparse(interval=60))
    port = await healthz(limit=10)
    with caplog.at_level(logging.DEBUG):
        for request in (b"garbage\r\n\r\n", b"GET / HTTP/1.1\r\nno colon here\r\n\r\n") * 5:
            assert (await get(port, request)).startswith(b"HTTP/1.1 400 ")
        # parse_head accepts these; aiohttp's parser does not
        for request in (b"G\x01T / HTTP/1.1\r\nHost: x\r\n\r\n",
                        b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: many\r\n\r\n"):
            assert b" 400 " in (await get(port, request)).split(b"\r\n")[0]
        assert (await get(port)).startswith(b"HTTP/1.1 200 ")
    refused = [r for r in caplog.records if "malformed" in r.getMessage()]
    assert len(refused) == 1 and refused[0].exc_info is None
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records]
    assert front._BAD_HEADS.suppressed == 11


async def test_a_tls_client_that_never_completes_its_handshake_is_dropped(tmp_path, monkeypatch):
    monkeypatch.setattr(connections, "HANDSHAKE_TIMEOUT", 0.3)
    settings = Settings(node_name="n1", root_dir=str(tmp_path))
    settings.server.address, settings.server.port = "127.0.0.1", 0
    api = await kubelet_api.start(Host(settings, FakeCRI(""), [], lambda: []))
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", api.port)  # plain TCP, no ClientHello
        assert await closed_by_server(reader, 3)
        writer.close()
        assert not api.handshakes
        reader, writer = await open_client(api.port)  # a real client is still served
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n")
        assert (await reader.read()).startswith(b"HTTP/1.1 401 ")  # anonymous auth is off by default
    finally:
        await api.close()


async def test_relays_past_the_cap_get_429(tmp_path, monkeypatch):
    monkeypatch.setattr(front, "MAX_STREAMS", 1)
    hold = asyncio.Event()

    class SlowCRI(FakeCRI):
        async def exec(self, cid, cmd, **streams):
            await hold.wait()
            return self.url

    settings = Settings(node_name="n1", root_dir=str(tmp_path))
    settings.server.address, settings.server.port = "127.0.0.1", 0
    settings.authn.anonymous_enabled, settings.authn.webhook_enabled = True, False
    settings.authz.mode = "AlwaysAllow"
    api = await kubelet_api.start(Host(settings, SlowCRI("http://127.0.0.1:1/x"), [], lambda: [pod()]))
    request = b"POST /exec/ns/p/main?command=true&output=1 HTTP/1.1\r\nHost: node\r\nUpgrade: SPDY/3.1\r\n\r\n"
    try:
        _, first = await open_client(api.port)
        first.write(request)
        await asyncio.wait_for(_until(lambda: len(api.streams) == 1), 5)
        reader, writer = await open_client(api.port)
        writer.write(request)
        answer = await asyncio.wait_for(reader.read(), 5)
        assert answer.startswith(b"HTTP/1.1 429 ") and answer.endswith(b"too many streaming sessions at once\n")
        hold.set()
        first.close()
    finally:
        await api.close()


async def _until(condition) -> None:
    while not condition():
        await asyncio.sleep(0.01)


async def test_the_pod_data_socket_is_root_only_and_replaces_a_stale_one(tmp_path):
    from pykubelet.status.manager import StatusManager

    path = unix_http.agent_socket(str(tmp_path))
    with open(path, "w") as f:
        f.write("a previous agent's leftover")
    close = await local.serve_socket(local.build_debug_app(StatusManager()), path)
    try:
        assert stat.S_ISSOCK(os.stat(path).st_mode) and stat.S_IMODE(os.stat(path).st_mode) == 0o600
        code, body = await asyncio.to_thread(unix_http.get, path, "/pods")
        assert code == 200 and b'"PodList"' in body
        assert os.listdir(tmp_path) == ["pykubelet.sock"]  # no staging directory left behind
    finally:
        await close()
    assert not os.path.exists(path)


def test_a_socket_path_too_long_for_unix_sockets_is_refused_naming_it(tmp_path):
    path = str(tmp_path / ("x" * 120))
    with pytest.raises(OSError, match="too long"):
        connections.bind_private_socket(path)


def test_the_open_files_soft_limit_is_raised_to_the_hard_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 2:
        pytest.skip("no room below the hard limit")
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, hard // 2), hard))
    try:
        assert fdlimit.raise_open_files_limit() == hard
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (hard, hard)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
