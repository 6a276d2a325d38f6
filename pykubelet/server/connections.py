"""How the agent's listeners accept connections without letting clients exhaust its file descriptors.

Each listener holds at most so many connections (ConnectionLimit); past that, a new connection is
closed as soon as it is accepted, before it costs a TLS handshake. A connection that has not
finished its TLS handshake after HANDSHAKE_TIMEOUT is dropped (asyncio's own timeout), and one
that sends no request head soon after is dropped too (front.py): only clients that prove
something keep a descriptor for long. The unix socket for root-only endpoints is made here too.
"""

from __future__ import annotations

import asyncio
import os
import resource
import shutil
import socket
import ssl
import tempfile
from typing import Any, Callable

from pykubelet.util.log import get_logger

log = get_logger(__name__)

HANDSHAKE_TIMEOUT = 5.0
"""Seconds a client has, from its TCP connect, to complete the TLS handshake."""
BACKLOG = 1024
"""Connections the kernel queues before we accept them (a flood must not drop a real client's SYN)."""
MAX_API_CONNECTIONS = 10_000


def api_connection_cap() -> int:
    """Connections the kubelet API may hold: at most half the descriptors the process may open,
    so that pods, containerd and the apiserver always have some left."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(64, min(MAX_API_CONNECTIONS, soft // 2)) if soft != resource.RLIM_INFINITY else MAX_API_CONNECTIONS


class ConnectionLimit:
    """The connections of one listener that still hold a descriptor, up to `limit`."""

    def __init__(self, limit: int):
        self.limit = limit
        self._open: set[Any] = set()

    def admit(self, transport: asyncio.BaseTransport) -> bool:
        """True if the new connection may stay; its descriptor counts until the transport closes it."""
        if len(self._open) >= self.limit:
            self._open = {sock for sock in self._open if sock.fileno() != -1}  # closed ones free their place
        if len(self._open) >= self.limit:
            return False
        self._open.add(transport.get_extra_info("socket"))
        return True

    @property
    def open(self) -> int:
        return sum(1 for sock in self._open if sock.fileno() != -1)


class _Admission(asyncio.Protocol):
    """Accepts or refuses a connection, then hands it to the protocol that serves it."""

    def __init__(self, serve: Callable[[], asyncio.Protocol], limit: ConnectionLimit,
                 context: ssl.SSLContext | None, handshakes: set[asyncio.Task[None]]):
        self.serve, self.limit, self.context, self.handshakes = serve, limit, context, handshakes

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if not self.limit.admit(transport):
            transport.abort()
            return
        if self.context is None:
            protocol = self.serve()
            transport.set_protocol(protocol)
            protocol.connection_made(transport)
            return
        transport.pause_reading()  # the TLS layer reads the ClientHello, not this protocol
        task = asyncio.get_running_loop().create_task(self._handshake(transport), name="kubelet-api-handshake")
        self.handshakes.add(task)
        task.add_done_callback(self.handshakes.discard)

    async def _handshake(self, transport: asyncio.BaseTransport) -> None:
        assert self.context is not None
        early = _Early()
        try:
            tls = await asyncio.get_running_loop().start_tls(
                transport, early, self.context, server_side=True,  # type: ignore[arg-type]
                ssl_handshake_timeout=HANDSHAKE_TIMEOUT)
        except OSError as e:  # ssl.SSLError, a reset, or the handshake timeout
            log.debug("TLS handshake failed", err=str(e) or type(e).__name__)
            transport.abort()
            return
        if early.lost:
            return
        protocol = self.serve()
        tls.set_protocol(protocol)
        protocol.connection_made(tls)
        for data in early.data:
            protocol.data_received(data)
        if early.eof and not protocol.eof_received():
            tls.close()


class _Early(asyncio.Protocol):
    """Holds what arrives right after the handshake, before the serving protocol is attached
    (asyncio may deliver the first request in the same turn the handshake completes)."""

    def __init__(self) -> None:
        self.data: list[bytes] = []
        self.eof = self.lost = False

    def data_received(self, data: bytes) -> None:
        self.data.append(data)

    def eof_received(self) -> bool:
        self.eof = True
        return True  # keep the transport open: the serving protocol decides

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True


async def serve(serve: Callable[[], asyncio.Protocol], host: str, port: int, limit: ConnectionLimit,
                context: ssl.SSLContext | None = None,
                handshakes: set[asyncio.Task[None]] | None = None) -> asyncio.Server:
    """Listen on host:port; each admitted connection (TLS-wrapped if context) goes to serve()'s protocol.
    `handshakes` collects the TLS handshakes in progress, for the owner to cancel when it stops."""
    loop = asyncio.get_running_loop()
    pending = handshakes if handshakes is not None else set()
    return await loop.create_server(lambda: _Admission(serve, limit, context, pending), host, port,
                                    reuse_address=True, backlog=BACKLOG)


def bind_private_socket(path: str) -> socket.socket:
    """A listening unix socket at `path` that only root can connect to (mode 0600).

    Bound in a fresh 0700 directory, restricted, then renamed into place: no other user ever
    has a moment to connect to it, whatever the umask. File I/O: call it in a thread."""
    if len(os.fsencode(path)) >= 108:
        raise OSError(f"the unix socket path {path} is too long (at most 107 bytes): use a shorter --root-dir")
    directory = os.path.dirname(path)
    scratch = tempfile.mkdtemp(prefix=".sock-", dir=directory)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        staged = os.path.join(scratch, "s")
        sock.bind(staged)
        os.chmod(staged, 0o600)
        os.replace(staged, path)
        sock.listen(BACKLOG)
        sock.setblocking(False)
        return sock
    except BaseException:
        sock.close()
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
