"""The listening side of the kubelet API: one TLS listener, two kinds of connection.

A connection whose first request is for /exec/, /attach/ or /portForward/ is handed over raw,
byte for byte, to the streaming proxy (streaming.py): those requests upgrade to SPDY or
WebSocket, which the runtime's streaming server speaks and we only relay. Every other connection
is handed to the aiohttp application. The decision is made on the first request's head; the
apiserver opens a fresh connection for every upgrade, so that is where such requests come.

The healthz port uses the same protocol without streams, for its timeout: a connection that sends
no request head within HEAD_TIMEOUT is closed. A head that is not HTTP gets one 400 and the
connection closes; such heads (anyone can send them) are logged as one short line now and then,
never a traceback per request (QuietServerLogger does the same for what aiohttp rejects).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from dataclasses import dataclass
from typing import Awaitable, Callable
from urllib.parse import urlsplit

from multidict import CIMultiDict

from pykubelet.util.log import get_logger

log = get_logger(__name__)

MAX_HEAD = 64 * 1024
HEAD_TIMEOUT = 10.0  # seconds from connect (after TLS) to a complete first request head
STREAM_PREFIXES = ("/exec/", "/attach/", "/portForward/")
MAX_STREAMS = 512  # exec/attach/port-forward relays at once; each holds two descriptors
BAD_REQUEST = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
TOO_MANY_STREAMS = (b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\nContent-Type: text/plain\r\n"
                    b"Content-Length: 36\r\nConnection: close\r\n\r\ntoo many streaming sessions at once\n")


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


class Sparse:
    """Says yes at most once per `interval` seconds, and how many times it said no in between."""

    def __init__(self, interval: float = 60.0):
        self.interval, self._last, self.suppressed = interval, -interval, 0

    def allow(self) -> bool:
        now = time.monotonic()
        if now - self._last < self.interval:
            self.suppressed += 1
            return False
        self._last = now
        return True


_BAD_HEADS = Sparse()


def note_bad_request(peer: object, what: str) -> None:
    """One short line for a request that is not HTTP; at most one a minute."""
    if _BAD_HEADS.allow():
        log.warning("Refused a malformed HTTP request", peer=str(peer), err=what,
                    suppressed_since_last=_BAD_HEADS.suppressed)
        _BAD_HEADS.suppressed = 0


class QuietServerLogger:
    """aiohttp's server logger, but a request aiohttp cannot parse is note_bad_request's short line."""

    def __init__(self, name: str = "aiohttp.server"):
        self._logger = logging.getLogger(name)

    def exception(self, msg: str, *args: object, exc_info: object = None, **kw: object) -> None:
        if not self._quieted(args, exc_info):
            self._logger.exception(msg, *args, exc_info=exc_info, **kw)  # type: ignore[arg-type]

    def debug(self, msg: str, *args: object, exc_info: object = None, **kw: object) -> None:
        if not self._quieted(args, exc_info):
            self._logger.debug(msg, *args, exc_info=exc_info, **kw)  # type: ignore[arg-type]

    @staticmethod
    def _quieted(args: tuple[object, ...], exc_info: object) -> bool:
        from aiohttp.http_exceptions import HttpProcessingError

        if isinstance(exc_info, HttpProcessingError):
            note_bad_request(args[0] if args else "?", type(exc_info).__name__)
            return True
        return False

    def __getattr__(self, name: str) -> object:
        return getattr(self._logger, name)


class FrontProtocol(asyncio.Protocol):
    """Buffers the first request's head, then gives the connection to its handler for good."""

    def __init__(self, http_factory: Callable[[], asyncio.Protocol], on_stream: StreamHandler | None = None,
                 tasks: set[asyncio.Task[None]] | None = None):
        self.http_factory, self.on_stream = http_factory, on_stream
        self.tasks: set[asyncio.Task[None]] = tasks if tasks is not None else set()
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self._timeout: asyncio.TimerHandle | None = None

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
        assert self._timeout is not None
        self._timeout.cancel()
        head = parse_head(bytes(self.buffer[:end]))
        if head is None:
            note_bad_request(self.transport.get_extra_info("peername"), "unparsable request head")
            self.transport.write(BAD_REQUEST)
            self.transport.close()
            return
        if self.on_stream is not None and head.path.startswith(STREAM_PREFIXES):
            if len(self.tasks) >= MAX_STREAMS:
                self.transport.write(TOO_MANY_STREAMS)
                self.transport.close()
                return
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
        assert self.on_stream is not None
        try:
            await self.on_stream(head, reader, writer)
        except (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError):
            pass
        except Exception as e:  # a bug must not pass silently, nor take the listener down
            log.error("Streaming request failed", exc_info=e, path=head.path)
        finally:
            writer.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timeout is not None:  # None: the TLS handshake failed, the connection never started
            self._timeout.cancel()
