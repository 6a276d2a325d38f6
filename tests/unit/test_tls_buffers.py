"""Every TLS connection of the agent reads into a 32 KiB buffer, not asyncio's 256 KiB (a burst of
apiserver requests opens up to 100 of them), and a large answer still arrives whole."""

from __future__ import annotations

import json
import subprocess
import sys
from asyncio import sslproto

from aiohttp import web

from pykubelet.config import ServerSettings
from pykubelet.kube.client import KubeClient
from pykubelet.server import tls
from pykubelet.util import tls_buffers

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:%d", certificate-authority: %s}}]
users: [{name: u, user: {token: the-token}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def test_every_command_bounds_the_buffer():
    """As `pykubelet` starts, in a fresh interpreter: asyncio's 256 KiB becomes 32 KiB."""
    code = ("import asyncio.sslproto as p, contextlib, io\nfrom pykubelet import cli\nbefore = p.SSLProtocol.max_size\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
            "    cli.main(['proxy', '--help'])\nprint(before, p.SSLProtocol.max_size)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == [str(256 * 1024), str(32 * 1024)]


async def test_a_large_answer_arrives_whole_through_the_bounded_buffer(tmp_path, monkeypatch):
    monkeypatch.setattr(sslproto.SSLProtocol, "max_size", sslproto.SSLProtocol.max_size)  # restored after
    tls_buffers.bound_read_buffers()
    pods = {"kind": "PodList", "items": [{"metadata": {"name": f"pod-{i}", "labels": {"n": "x" * 200}}}
                                         for i in range(8000)]}  # ~2.5 MB of JSON: many TLS records
    buffers = []

    async def pod_list(request):
        buffers.append(len(request.transport._ssl_protocol._ssl_buffer))  # asyncio's TLS transport
        return web.json_response(pods)
    cert, key = tls.serving_files(ServerSettings(), str(tmp_path / "pki"), "localhost", ["127.0.0.1"])
    app = web.Application()
    app.router.add_get("/api/v1/pods", pod_list)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls.server_context(ServerSettings(), cert, key, ""))
    await site.start()
    (tmp_path / "kubeconfig").write_text(KUBECONFIG % (site._server.sockets[0].getsockname()[1], cert))
    kube = await KubeClient.from_kubeconfig(str(tmp_path / "kubeconfig"))
    try:
        answer = await kube.get("/api/v1/pods")
    finally:
        await kube.close()
        await runner.cleanup()
    assert answer == pods
    assert len(json.dumps(pods)) > 2_000_000
    assert buffers == [32 * 1024]  # the server's side of the connection, as the client's
