"""What a burst of apiserver requests costs the agent's memory: N pods' status patches at once
through the agent's apiserver client (kube/client.py) to a TLS server in another process that
answers each after 0.3 s, as a loaded apiserver does; the client's RSS before, at the burst, once
the pool's idle connections are closed, and after malloc_trim. Each variant in a fresh interpreter.

    python -m tests.bench.tls_burst [--pods 110] [--runs 3]

Variants: asyncio's own TLS read buffer (256 KiB a connection), and the agent's
(util/tls_buffers.py, as `pykubelet` sets it at start).
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import statistics
import subprocess
import sys
import tempfile

from aiohttp import web

from pykubelet.config import ServerSettings
from pykubelet.server import tls

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:%d", certificate-authority: %s}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""
STATUS = {"status": {"phase": "Running", "conditions": [
    {"type": t, "status": "True", "lastTransitionTime": "2026-12-07T02:00:00Z"}
    for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")],
    "containerStatuses": [{"name": "main", "image": "busybox:1.36", "imageID": "sha256:" + "a" * 64,
                           "containerID": "containerd://" + "b" * 64, "ready": True, "started": True,
                           "restartCount": 0, "state": {"running": {"startedAt": "2026-12-07T02:00:00Z"}}}]}}


def rss_mib() -> float:
    with open("/proc/self/smaps_rollup") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Rss:")) / 1024


async def serve(directory: str) -> None:
    """The apiserver's stand-in: its port on stdout, then the count of connections it saw."""
    peers: set = set()

    async def patch(request: web.Request) -> web.Response:
        peers.add(request.transport.get_extra_info("peername"))
        await request.read()
        await asyncio.sleep(0.3)
        return web.json_response({"metadata": {"resourceVersion": "1"}, **STATUS})
    cert, key = tls.serving_files(ServerSettings(), directory, "localhost", ["127.0.0.1"])
    app = web.Application()
    app.router.add_route("PATCH", "/api/v1/namespaces/default/pods/{name}/status", patch)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls.server_context(ServerSettings(), cert, key, ""))
    await site.start()
    print(site._server.sockets[0].getsockname()[1], flush=True)
    while True:
        await asyncio.to_thread(sys.stdin.readline)
        print(len(peers), flush=True)


async def burst(pods: int, bounded: bool) -> dict:
    if bounded:
        from pykubelet.util import tls_buffers
        tls_buffers.bound_read_buffers()
    from pykubelet.kube.client import KubeClient
    with tempfile.TemporaryDirectory() as directory:
        server = await asyncio.create_subprocess_exec(sys.executable, "-m", "tests.bench.tls_burst", "--serve",
                                                      directory, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            port = int(await server.stdout.readline())
            with open(f"{directory}/kubeconfig", "w") as f:
                f.write(KUBECONFIG % (port, f"{directory}/kubelet.crt"))
            kube = await KubeClient.from_kubeconfig(f"{directory}/kubeconfig")
            await kube.patch("/api/v1/namespaces/default/pods/p/status", STATUS)  # one connection, warm
            out = {"before": rss_mib()}
            await asyncio.gather(*(kube.patch(f"/api/v1/namespaces/default/pods/p{i}/status", STATUS)
                                   for i in range(pods)))
            out["burst"] = rss_mib()
            server.stdin.write(b"\n")
            out["connections"] = int(await server.stdout.readline())
            await asyncio.sleep(35)  # aiohttp closes a pooled connection idle for 15 s, checked every 15 s
            out["idle"] = rss_mib()
            ctypes.CDLL(None).malloc_trim(0)
            out["trimmed"] = rss_mib()
            await kube.close()
        finally:
            server.kill()
            await server.wait()
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, default=110)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--one", choices=("asyncio", "bounded"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.serve))
        return 0
    if args.one:
        print(json.dumps(asyncio.run(burst(args.pods, args.one == "bounded"))))
        return 0
    results: dict[str, list[dict]] = {"asyncio": [], "bounded": []}
    for _ in range(args.runs):
        for variant in results:  # alternating, each in a fresh interpreter
            run = subprocess.run([sys.executable, "-m", "tests.bench.tls_burst", "--pods", str(args.pods),
                                  "--one", variant], capture_output=True, text=True, check=True)
            results[variant].append(json.loads(run.stdout.splitlines()[-1]))
    print(f"{args.pods} status patches at once, median of {args.runs} (MiB of the client's RSS)")
    print(f"{'TLS read buffer':16} {'connections':>11} {'before':>7} {'burst':>7} {'idle':>7} {'trimmed':>8}")
    for variant, runs in results.items():
        median = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        label = "256 KiB (asyncio)" if variant == "asyncio" else "32 KiB (agent)"
        print(f"{label:16} {median['connections']:11.0f} {median['before']:7.1f} {median['burst']:7.1f} "
              f"{median['idle']:7.1f} {median['trimmed']:8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
