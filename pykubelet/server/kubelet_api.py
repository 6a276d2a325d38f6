"""The kubelet API on :10250: start(...) builds and opens it; the agent calls nothing else here.

HTTPS on address:port (tls.py), every request authenticated and authorized (auth.py), plain
endpoints in routes.py and the exec/attach/port-forward relay in streaming.py, both behind one
listener (front.py) that caps its connections and drops the silent ones (connections.py).
"""

from __future__ import annotations

import asyncio
import errno
import ssl
from dataclasses import dataclass, field

from aiohttp import web

from pykubelet.server import connections, routes, streaming, tls
from pykubelet.server.auth import Authenticator, Authorizer, Gate
from pykubelet.server.front import FrontProtocol, QuietServerLogger, RequestHead
from pykubelet.server.review_limits import InflightReviews
from pykubelet.server.host import Host
from pykubelet.util.log import get_logger

log = get_logger(__name__)


class BindError(RuntimeError):
    """The API's address cannot be listened on; the message names it."""


@dataclass
class KubeletAPI:
    runner: web.AppRunner
    server: asyncio.Server
    port: int
    streams: set[asyncio.Task[None]] = field(default_factory=set)
    handshakes: set[asyncio.Task[None]] = field(default_factory=set)

    async def close(self) -> None:
        self.server.close()
        tasks = list(self.streams) + list(self.handshakes)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.runner.cleanup()


async def start(host: Host, context: ssl.SSLContext | None = None) -> KubeletAPI:
    """Listen on the configured address and port; BindError or tls.TLSError if it cannot. `context`:
    a listener whose certificate changes (serverTLSBootstrap); else one for the configured or
    self-signed files."""
    s = host.settings
    cert = "from the cluster (serverTLSBootstrap)"
    if context is None:
        cert, key = await asyncio.to_thread(tls.serving_files, s.server, s.certificate_dir(), s.node_name,
                                            host.node_ips)
        context = tls.server_context(s.server, cert, key, s.authn.client_ca_file)
    reviews = InflightReviews()  # one cap for token and access reviews together
    gate = Gate(Authenticator(s.authn, host.review, reviews), Authorizer(s.authz, s.node_name, host.review, reviews))
    runner = web.AppRunner(routes.build_app(host, gate), access_log=None, handle_signals=False,
                           logger=QuietServerLogger())
    await runner.setup()
    streams: set[asyncio.Task[None]] = set()
    handshakes: set[asyncio.Task[None]] = set()

    async def on_stream(head: RequestHead, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await streaming.handle(host, gate, head, reader, writer)

    limit = connections.ConnectionLimit(connections.api_connection_cap())
    try:
        server = await connections.serve(lambda: FrontProtocol(runner.server, on_stream, streams),
                                         s.server.address, s.server.port, limit, context, handshakes)
    except OSError as e:
        await runner.cleanup()
        why = "already in use" if e.errno == errno.EADDRINUSE else e.strerror
        raise BindError(f"cannot listen on {s.server.address}:{s.server.port} for the kubelet API: {why}") from None
    port = server.sockets[0].getsockname()[1]
    log.info("Kubelet API listening", address=s.server.address, port=port, cert=cert,
             authn=("x509 " if s.authn.client_ca_file else "") + ("webhook " if s.authn.webhook_enabled else "")
             + ("anonymous" if s.authn.anonymous_enabled else ""), authz=s.authz.mode, max_connections=limit.limit)
    return KubeletAPI(runner, server, port, streams, handshakes)
