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
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from pyroute2.netns import setns

from pykubelet.kube import errors
from pykubelet.kube.client import KubeClient
from tests.bed.relay import listener_in
from tests.bench.startup import machine
from tests.cluster.conftest import ADMIN, REPO, control_plane, kubectl
from tests.helpers import wait_for

NETNS = "pkl-bench-proxy"
NAMESPACE = "t-bench-proxy"
K8S_BIN = os.path.join(os.environ.get("PYKUBELET_CACHE", "/var/cache/pykubelet"), "k8s",
                       os.environ.get("K8S_VERSION", "v1.36.3"), "bin")
METRICS = "127.0.0.1:10249"
API = f"127.0.0.1:{os.environ.get('PYKUBELET_API_PORT', '6443')}"  # the admin kubeconfig's server (tests/bed/cluster.sh)
SERVER_IP, SERVER_PORT = "10.244.99.10", 8080  # the latency test's endpoint: a listener on the node
MODES = ("iptables", "nftables")
KINDS = ("kube-proxy", "pykubelet")
ENDPOINTS_PER_SERVICE = 10


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
        page = self.metrics()

        def value(name: str) -> float:
            m = re.search(rf'^{name}{{ip_family="IPv4"}} (\S+)$', page, re.M)
            return float(m.group(1)) if m else 0.0
        return (int(value("kubeproxy_sync_full_proxy_rules_duration_seconds_count")),
                value("kubeproxy_sync_full_proxy_rules_duration_seconds_sum"))

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


# --- the API objects

def service(name: str, port: int = 80) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"ports": [{"name": "http", "port": port, "targetPort": SERVER_PORT}]}}


def endpoint_slice(name: str, ips: list[str]) -> dict:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": f"{name}-1", "namespace": NAMESPACE,
                         "labels": {"kubernetes.io/service-name": name}},
            "addressType": "IPv4", "ports": [{"name": "http", "port": SERVER_PORT, "protocol": "TCP"}],
            "endpoints": [{"addresses": [ip], "conditions": {"ready": True}} for ip in ips]}


async def create_bulk(kube: KubeClient, start: int, stop: int) -> None:
    limit = asyncio.Semaphore(32)

    async def one(i: int) -> None:
        name = f"b-{i:05d}"
        ips = [f"10.200.{(i * ENDPOINTS_PER_SERVICE + j) // 250 % 250}.{(i * ENDPOINTS_PER_SERVICE + j) % 250 + 1}"
               for j in range(ENDPOINTS_PER_SERVICE)]
        async with limit:
            for path, body in ((f"/api/v1/namespaces/{NAMESPACE}/services", service(name)),
                               (f"/apis/discovery.k8s.io/v1/namespaces/{NAMESPACE}/endpointslices",
                                endpoint_slice(name, ips))):
                try:
                    await kube.create(path, body)
                except errors.Conflict:
                    pass  # already there from an earlier step
    print(f"  creating Services {start}..{stop - 1} with {ENDPOINTS_PER_SERVICE} endpoints each", flush=True)
    await asyncio.gather(*(one(i) for i in range(start, stop)))


# --- 1. Service created -> first connection

class Prober:
    """A thread inside the node's namespace that connects until a connection is accepted."""

    def __init__(self) -> None:
        self.fd = os.open(f"/var/run/netns/{NETNS}", os.O_RDONLY)

    def first_connection(self, ip: str, port: int, deadline: float) -> float | None:
        done: list[float | None] = [None]

        def run() -> None:
            setns(self.fd)  # this thread only
            while time.monotonic() < deadline:
                with socket.socket() as s:
                    s.settimeout(0.02)
                    try:
                        s.connect((ip, port))
                        done[0] = time.monotonic()
                        return
                    except OSError:
                        pass
                time.sleep(0.003)
        t = threading.Thread(target=run)
        t.start()
        t.join()
        return done[0]


async def measure_latency(kube: KubeClient, node: Node, count: int) -> list[float]:
    listener = listener_in(NETNS, SERVER_IP, SERVER_PORT)  # the endpoint: the kernel completes the handshakes
    listener.setblocking(True)

    def drain() -> None:
        while True:
            try:
                listener.accept()[0].close()
            except OSError:
                return  # closed: the measurement is over
    threading.Thread(target=drain, daemon=True).start()
    prober = Prober()
    out = []
    try:
        for i in range(count):
            await asyncio.sleep(2)  # let the previous change settle: each Service starts from a quiet proxy
            name = f"lat-{node.kind}-{node.mode}-{i}"
            started = time.monotonic()
            created = await kube.create(f"/api/v1/namespaces/{NAMESPACE}/services", service(name))
            await kube.create(f"/apis/discovery.k8s.io/v1/namespaces/{NAMESPACE}/endpointslices",
                              endpoint_slice(name, [SERVER_IP]))
            ip = created["spec"]["clusterIP"]
            reached = await asyncio.to_thread(prober.first_connection, ip, 80, started + 30)
            if reached is None:
                raise RuntimeError(f"{node.kind} ({node.mode}): no connection to {name} ({ip}) within 30 s")
            out.append(reached - started)
    finally:
        os.close(prober.fd)
        listener.close()
    return out


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


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


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
                        latency[(kind, mode)] = await measure_latency(kube, node, args.latency)
                        print(f"    p50 {statistics.median(latency[(kind, mode)]) * 1000:.0f} ms", flush=True)
            await kube.delete(f"/apis/discovery.k8s.io/v1/namespaces/{NAMESPACE}/endpointslices")
            for name in [s["metadata"]["name"] for s in
                         (await kube.get(f"/api/v1/namespaces/{NAMESPACE}/services"))["items"]]:
                await kube.delete(f"/api/v1/namespaces/{NAMESPACE}/services/{name}")
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
    print("| mode | kube-proxy p50 | kube-proxy p95 | pykubelet p50 | pykubelet p95 | p50 ratio |")
    print("|---|---:|---:|---:|---:|---:|")
    for mode in args.modes.split(","):
        kp, ours = latency[("kube-proxy", mode)], latency[("pykubelet", mode)]
        print(f"| {mode} | {statistics.median(kp) * 1000:.0f} | {pct(kp, 0.95) * 1000:.0f} | "
              f"{statistics.median(ours) * 1000:.0f} | {pct(ours, 0.95) * 1000:.0f} | "
              f"{statistics.median(ours) / statistics.median(kp):.2f}× |")
    print(f"\nFirst full sync into an empty node, {ENDPOINTS_PER_SERVICE} endpoints per Service (seconds; "
          "start -> synced in parentheses)\n")
    print("| mode | Services | kube-proxy | pykubelet | ratio |")
    print("|---|---:|---:|---:|---:|")
    for mode in args.modes.split(","):
        for services in counts:
            (kp, kp_ready), (ours, ours_ready) = syncs[("kube-proxy", mode, services)], \
                syncs[("pykubelet", mode, services)]
            print(f"| {mode} | {services:,} | {kp:.3f} ({kp_ready:.1f}) | {ours:.3f} ({ours_ready:.1f}) | "
                  f"{ours / kp:.2f}× |")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
