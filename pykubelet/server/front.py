"""The listening side of the kubelet API: one TLS listener, two kinds of connection.

A connection whose first request is for /exec/, /attach/ or /portForward/ is handed over raw,
byte for byte, to the streaming proxy (streaming.py): those requests upgrade to SPDY or
WebSocket, which the runtime's streaming server speaks and we only relay. Every other connection
is handed to the aiohttp application. The decision is made on the first request's head; the
apiserver opens a fresh connection for every upgrade, so that is where such requests come.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from typing import Awaitable, Callable
from urllib.parse import urlsplit

from multidict import CIMultiDict

from pykubelet.util.log import get_logger

log = get_logger(__name__)

MAX_HEAD = 64 * 1024
HEAD_TIMEOUT = 60.0  # a connection that sends no request head in this long is closed
STREAM_PREFIXES = ("/exec/", "/attach/", "/portForward/")


@dataclass
class RequestHead:
    method: str
    target: str
    version: str
    headers: CIMultiDict[str]
    raw: bytes

    @property
    def path(self) -> str:
        return urlsplit(self.target).path

    @property
    def query(self) -> str:
        return urlsplit(self.target).query


def parse_head(raw: bytes) -> RequestHead | None:
    try:
        lines = raw.decode("latin-1").split("\r\n")
        method, target, version = lines[0].split(" ", 2)
    except ValueError:
        return None
    headers: CIMultiDict[str] = CIMultiDict()
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            return None
        headers.add(name.strip(), value.strip())
    return RequestHead(method, target, version, headers, raw)


StreamHandler = Callable[[RequestHead, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class FrontProtocol(asyncio.Protocol):
    """Buffers the first request's head, then gives the connection to its handler for good."""

    def __init__(self, http_factory: Callable[[], asyncio.Protocol], on_stream: StreamHandler,
                 tasks: set[asyncio.Task[None]]):
        self.http_factory, self.on_stream, self.tasks = http_factory, on_stream, tasks
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._timeout = asyncio.get_running_loop().call_later(HEAD_TIMEOUT, transport.close)

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        self.buffer += data
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buffer) > MAX_HEAD:
                self.transport.close()
            return
        self._timeout.cancel()
        head = parse_head(bytes(self.buffer[:end]))
        if head is not None and head.path.startswith(STREAM_PREFIXES):
            loop = asyncio.get_running_loop()
            reader = asyncio.StreamReader(limit=MAX_HEAD)
            protocol = asyncio.StreamReaderProtocol(reader)
            self.transport.set_protocol(protocol)
            protocol.connection_made(self.transport)
            reader.feed_data(bytes(self.buffer[end + 4:]))
            writer = asyncio.StreamWriter(self.transport, protocol, reader, loop)
            task = loop.create_task(self._stream(head, reader, writer), name=f"kubelet-api-stream {head.path}")
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        else:
            http = self.http_factory()
            self.transport.set_protocol(http)
            http.connection_made(self.transport)
            http.data_received(bytes(self.buffer))
        self.buffer = bytearray()

    async def _stream(self, head: RequestHead, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self.on_stream(head, reader, writer)
        except (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError):
            pass
        except Exception as e:  # a bug must not pass silently, nor take the listener down
            log.error("Streaming request failed", exc_info=e, path=head.path)
        finally:
            writer.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._timeout.cancel()
