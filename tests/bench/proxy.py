"""Service proxying: `pykubelet proxy` vs the real kube-proxy v1.36.3 (built from the same release's Go
modules), in the same run, on the same control plane, in both modes.

1. Service created -> first connection: a selectorless Service and its EndpointSlice (one endpoint,
   a listener on the node) are created through the API; a client on the node tries to connect to
   the cluster IP every few milliseconds. 20 Services, one after the other.
2. Rule sync time: N Services with 10 endpoints each are in the API; the proxy starts on an empty
   node and its first full sync is timed (kubeproxy_sync_full_proxy_rules_duration_seconds, which
   both report), plus the wall time from its start until that sync is done. N = 100, 1,000, 5,000.

Each proxy runs in a network namespace of its own (a node's host network), reaching the loopback
apiserver through a relay inside it (tests/bed/relay.py), so nothing touches the machine's rules.

    python -m tests.bench.proxy [--counts 100,1000,5000] [--latency 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from pykubelet.kube.client import KubeClient
from tests.bed.relay import listener_in
from tests.bench.proxy_measure import (ENDPOINTS_PER_SERVICE, METRICS, NAMESPACE, SERVER_IP, SERVER_PORT,
                                       create_bulk, delete_services, full_syncs, latency_table, measure_latency,
                                       sync_table)
from tests.bench.startup import machine
from tests.cluster.conftest import ADMIN, REPO, control_plane, kubectl
from tests.helpers import wait_for

NETNS = "pkl-bench-proxy"
K8S_BIN = os.path.join(os.environ.get("PYKUBELET_CACHE", "/var/cache/pykubelet"), "k8s",
                       os.environ.get("K8S_VERSION", "v1.36.3"), "bin")
API = f"127.0.0.1:{os.environ.get('PYKUBELET_API_PORT', '6443')}"  # the admin kubeconfig's server (tests/bed/cluster.sh)
MODES = ("iptables", "nftables")
KINDS = ("kube-proxy", "pykubelet")


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {result.stderr.strip()}")
    return result


class Node:
    """A fresh network namespace with a proxy in it; everything goes when it stops."""

    def __init__(self, kind: str, mode: str, workdir: str):
        self.kind, self.mode, self.workdir = kind, mode, workdir
        self.proc: subprocess.Popen[bytes] | None = None
        self.relay: subprocess.Popen[str] | None = None

    def __enter__(self) -> "Node":
        sh("ip", "netns", "del", NETNS, check=False)
        sh("ip", "netns", "add", NETNS)
        sh("ip", "-n", NETNS, "link", "set", "lo", "up")
        # An interface, a default route and the endpoint's address, as a node has. A veth pair with
        # both ends inside (kernels without the dummy driver, as this test bed's, still have veth).
        sh("ip", "-n", NETNS, "link", "add", "d0", "type", "veth", "peer", "name", "d1")
        sh("ip", "-n", NETNS, "link", "set", "d1", "up")
        sh("ip", "-n", NETNS, "link", "set", "d0", "up")
        sh("ip", "-n", NETNS, "addr", "add", "10.250.99.1/24", "dev", "d0")
        sh("ip", "-n", NETNS, "addr", "add", f"{SERVER_IP}/32", "dev", "d0")
        sh("ip", "-n", NETNS, "route", "add", "default", "via", "10.250.99.254", "dev", "d0")
        self.relay = subprocess.Popen([sys.executable, "-m", "tests.bed.relay", "--netns", NETNS, "--listen",
                                       API, "--to", API], cwd=REPO, stdout=subprocess.PIPE,
                                      text=True)
        assert self.relay.stdout is not None and self.relay.stdout.readline().strip() == "ready"
        return self

    def start(self) -> float:
        common = ["--kubeconfig", str(ADMIN), "--hostname-override", "bench-proxy", "--proxy-mode", self.mode,
                  "--cluster-cidr", "10.244.0.0/16", "--metrics-bind-address", METRICS,
                  "--healthz-bind-address", "127.0.0.1:10256"]
        if self.kind == "kube-proxy":
            # (conntrack sysctls are the machine's, not the namespace's: leave them alone)
            argv = [os.path.join(K8S_BIN, "kube-proxy"), *common, "--conntrack-max-per-core=0",
                    "--conntrack-tcp-timeout-established=0", "--conntrack-tcp-timeout-close-wait=0"]
        else:
            argv = [sys.executable, "-m", "pykubelet.cli", "proxy", *common]
        log = open(os.path.join(self.workdir, f"{self.kind}-{self.mode}.log"), "ab")
        started = time.monotonic()
        self.proc = subprocess.Popen(["ip", "netns", "exec", NETNS, *argv], cwd=REPO, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        return started

    def metrics(self) -> str:
        return sh("ip", "netns", "exec", NETNS, "busybox", "wget", "-qO-", f"http://{METRICS}/metrics",
                  check=False).stdout

    def full_syncs(self) -> tuple[int, float]:
        """(count, total seconds) of full syncs so far (IPv4)."""
        return full_syncs(self.metrics())

    def programmed(self) -> int:
        """How many Service ports have rules (cluster IPs dispatched)."""
        if self.mode == "iptables":
            return sh("ip", "netns", "exec", NETNS, "iptables-save", "-t", "nat").stdout.count(" cluster IP\" ")
        listing = sh("ip", "netns", "exec", NETNS, "nft", "list", "map", "ip", "kube-proxy", "service-ips",
                     check=False).stdout
        return listing.count(": goto ")

    def __exit__(self, *_: object) -> None:
        for proc in (self.proc, self.relay):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        sh("ip", "netns", "exec", NETNS, sys.executable, "-m", "pykubelet.cli", "proxy", "--cleanup", check=False)
        sh("ip", "netns", "del", NETNS, check=False)


# --- 2. rule sync time

async def measure_sync(node: Node, services: int) -> tuple[float, float]:
    """(first full sync's seconds, start -> that sync done, in seconds)."""
    started = node.start()
    count = await wait_for(lambda: node.full_syncs()[0] >= 1 and node.full_syncs(), 900,
                           f"{node.kind} ({node.mode}) to finish its first full sync of {services} Services",
                           interval=0.2)
    ready = time.monotonic() - started
    programmed = node.programmed()
    if programmed < services:
        raise RuntimeError(f"{node.kind} ({node.mode}) programmed {programmed} Service ports, not {services}")
    syncs, seconds = count
    return seconds / syncs, ready


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--counts", default="100,1000,5000")
    parser.add_argument("--latency", type=int, default=20)
    parser.add_argument("--modes", default=",".join(MODES), help="in this order (nftables first: its syncs are quick)")
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    # A SIGTERM (timeout, a stopped make) cancels the run, so the proxies, the namespace and the
    # control plane it started are stopped on the way out.
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, asyncio.current_task().cancel)
    subprocess.run(["bash", str(REPO / "tests" / "bed" / "build-kube-proxy.sh")], check=True)
    with control_plane():
        return await measure(args, counts)


async def measure(args: argparse.Namespace, counts: list[int]) -> int:
    kubectl("delete", "namespace", NAMESPACE, "--wait=true", "--timeout=600s", check=False)
    kubectl("create", "namespace", NAMESPACE)
    kube = await KubeClient.from_kubeconfig(str(ADMIN), qps=1000, burst=1000)
    # Both proxies look their Node up for its address; without one kube-proxy waits before it starts.
    kubectl("delete", "node", "bench-proxy", check=False)
    await kube.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "bench-proxy"}})
    await kube.patch("/api/v1/nodes/bench-proxy/status",
                     {"status": {"addresses": [{"type": "InternalIP", "address": "10.250.99.1"}]}})
    latency: dict[tuple[str, str], list[float]] = {}
    syncs: dict[tuple[str, str, int], tuple[float, float]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="pykubelet-bench-proxy-") as workdir:
            for mode in args.modes.split(","):
                for kind in KINDS:
                    print(f"  Service -> connection: {kind}, {mode}", flush=True)
                    with Node(kind, mode, workdir) as node:
                        node.start()
                        await wait_for(lambda: node.full_syncs()[0] >= 1, 120, f"{kind} to sync", interval=0.2)
                        listener = listener_in(NETNS, SERVER_IP, SERVER_PORT)  # the kernel completes the handshakes
                        latency[(kind, mode)] = await measure_latency(kube, f"{kind}-{mode}", args.latency, listener,
                                                                      NETNS)
                        print(f"    p50 {statistics.median(latency[(kind, mode)]) * 1000:.0f} ms", flush=True)
            await delete_services(kube)
            made = 0
            for services in counts:
                await create_bulk(kube, made, services)
                made = services
                for mode in args.modes.split(","):
                    for kind in KINDS:
                        print(f"  first full sync of {services} Services: {kind}, {mode}", flush=True)
                        with Node(kind, mode, workdir) as node:
                            syncs[(kind, mode, services)] = await measure_sync(node, services)
                        print("    {:.3f} s ({:.1f} s from start)".format(*syncs[(kind, mode, services)]), flush=True)
    finally:
        await kube.close()
        kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)
        kubectl("delete", "node", "bench-proxy", "--wait=false", check=False)

    print(f"\n{machine()}\nkube-proxy: {sh(os.path.join(K8S_BIN, 'kube-proxy'), '--version').stdout.strip()}, "
          f"iptables {sh('iptables', '--version').stdout.split()[1]}, nft {sh('nft', '--version').stdout.split()[1]}\n")
    print(f"Service created -> first connection, {args.latency} Services one by one (ms)\n")
    print(latency_table([(mode, latency[("kube-proxy", mode)], latency[("pykubelet", mode)])
                         for mode in args.modes.split(",")]))
    print(f"\nFirst full sync into an empty node, {ENDPOINTS_PER_SERVICE} endpoints per Service (seconds; "
          "start -> synced in parentheses)\n")
    print(sync_table([(mode, services, syncs[("kube-proxy", mode, services)], syncs[("pykubelet", mode, services)])
                      for mode in args.modes.split(",") for services in counts]))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
