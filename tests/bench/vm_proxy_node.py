"""The in-VM half of tests/bench/vm_proxy.py: one step per call, as root on the VM, run by the
VM's pykubelet venv from the bundle's source tree (tests/bench/vm_proxy.py says how). Progress
goes to stderr; the last line of stdout is the step's result as JSON.

    setup                                 the namespace and the latency test's endpoint
    latency --kind K --label L --count 20 Service created -> first connection, K started on a clean node
    bulk --services N                     the latency test's Services gone, N Services x 10 endpoints made
    sync --kind K --services N            K's first full sync of them, K started on a clean node
    profile --services N                  pykubelet's first full sync under cProfile: where the time goes

Each proxy runs in the VM's own network namespace (the node's host network) in IPVS mode and
is killed after its step; both proxies' `--cleanup` run before and after, and the step fails if
a virtual server or kube-ipvs0 is left. The latency test's endpoint lives in a network namespace
of its own behind a veth pair, as a pod would: its address is not the node's, so IPVS
masquerades to it (a local real server would be delivered to, unchanged).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import pstats
import signal
import subprocess
import sys
import time
import urllib.request

from pykubelet.kube import errors
from pykubelet.kube.client import KubeClient
from tests.bed.relay import listener_in
from tests.bench.proxy_measure import (METRICS, NAMESPACE, SERVER_IP, SERVER_PORT, create_bulk, delete_services,
                                       full_syncs, measure_latency)

ADMIN = "/etc/kubernetes/admin.conf"
KUBE_PROXY = "/usr/local/bin/kube-proxy"  # copied in by tests/bench/vm_proxy.py
PROXIES = {"kube-proxy": [KUBE_PROXY], "pykubelet": ["/usr/bin/pykubelet", "proxy"]}
ENDPOINT_NETNS = "pkl-bench-ep"
ENDPOINT_GATEWAY = "10.244.99.1"  # the node's end of the veth
LOG = "/var/log/pkl-bench-{kind}.log"
PROFILE = "/root/pykubelet-proxy.prof"
# kube-proxy's IPVS mode reports no full/partial split (only its iptables and nftables modes do):
# every sync's histogram, whose first entry is the first sync, a full one in both proxies.
SYNCS = "kubeproxy_sync_proxy_rules_duration_seconds"


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {result.stderr.strip()}")
    return result


def progress(message: str) -> None:
    print(f"  {message}", file=sys.stderr, flush=True)


def virtual_servers() -> int:
    try:
        with open("/proc/net/ip_vs") as f:
            return sum(1 for line in f if line.split()[:1] in (["TCP"], ["UDP"], ["SCTP"]))
    except FileNotFoundError:
        return 0  # ip_vs not loaded


def clean() -> None:
    """Both proxies' --cleanup; then no virtual server and no kube-ipvs0, or the node is not clean."""
    for argv in PROXIES.values():
        sh(*argv, "--cleanup", check=False)
    left = virtual_servers()
    link = sh("ip", "link", "show", "kube-ipvs0", check=False).returncode == 0
    if left or link:
        raise RuntimeError(f"the node is not clean after --cleanup: {left} virtual servers, "
                           f"kube-ipvs0 {'still there' if link else 'gone'}")


def start(kind: str, node: str, profile: str = "") -> subprocess.Popen[bytes]:
    """The proxy, under cProfile writing to `profile` when given (pykubelet only)."""
    command = [sys.executable, "-m", "cProfile", "-o", profile, "-m", "pykubelet.cli", "proxy"] if profile \
        else PROXIES[kind]
    argv = [*command, "--kubeconfig", ADMIN, "--hostname-override", node, "--proxy-mode", "ipvs",
            "--cluster-cidr", "10.244.0.0/16", "--metrics-bind-address", METRICS,
            "--healthz-bind-address", "127.0.0.1:10256"]
    with open(LOG.format(kind=kind), "ab") as log:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """The proxy and whatever it was running (an iptables-restore, an ipset) killed."""
    if proc.poll() is None:  # else its pid may be another's by now
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


def log_tail(kind: str) -> str:
    with open(LOG.format(kind=kind), errors="replace") as f:
        return f.read()[-3000:]


def metrics_page() -> str:
    try:
        with urllib.request.urlopen(f"http://{METRICS}/metrics", timeout=5) as response:
            return response.read().decode()
    except OSError:
        return ""  # not serving yet


async def first_full_sync(kind: str, proc: subprocess.Popen[bytes], timeout: float) -> tuple[int, float]:
    """(count, seconds) of syncs, polled every 0.2 s until there is one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{kind} exited ({proc.returncode}):\n{log_tail(kind)}")
        count, seconds = full_syncs(await asyncio.to_thread(metrics_page), SYNCS)
        if count:
            return count, seconds
        await asyncio.sleep(0.2)
    raise RuntimeError(f"{kind}: no full sync within {timeout:.0f} s:\n{log_tail(kind)}")


async def setup() -> dict:
    sh("modprobe", "-a", "ip_vs", "ip_vs_rr", "nf_conntrack")
    sh("ip", "netns", "add", ENDPOINT_NETNS)
    sh("ip", "link", "add", "pkl-ep0", "type", "veth", "peer", "name", "eth0", "netns", ENDPOINT_NETNS)
    sh("ip", "addr", "add", f"{ENDPOINT_GATEWAY}/32", "dev", "pkl-ep0")
    sh("ip", "link", "set", "pkl-ep0", "up")
    sh("ip", "route", "add", f"{SERVER_IP}/32", "dev", "pkl-ep0", "src", ENDPOINT_GATEWAY)
    for command in (("link", "set", "lo", "up"), ("addr", "add", f"{SERVER_IP}/24", "dev", "eth0"),
                    ("link", "set", "eth0", "up"), ("route", "add", "default", "via", ENDPOINT_GATEWAY)):
        sh("ip", "-n", ENDPOINT_NETNS, *command)
    kube = await KubeClient.from_kubeconfig(ADMIN)
    try:
        await kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                 "metadata": {"name": NAMESPACE}})
    except errors.Conflict:
        pass
    finally:
        await kube.close()
    return {}


async def latency(kind: str, node: str, label: str, count: int) -> dict:
    clean()
    proc = start(kind, node)
    kube = await KubeClient.from_kubeconfig(ADMIN, qps=1000, burst=1000)
    try:
        await first_full_sync(kind, proc, 900)
        listener = listener_in(ENDPOINT_NETNS, SERVER_IP, SERVER_PORT)  # the kernel completes the handshakes
        seconds = await measure_latency(kube, label, count, listener)
    finally:
        await kube.close()
        stop(proc)
    clean()
    return {"seconds": seconds}


async def bulk(services: int) -> dict:
    kube = await KubeClient.from_kubeconfig(ADMIN, qps=1000, burst=1000)
    try:
        await delete_services(kube)
        await create_bulk(kube, 0, services)
    finally:
        await kube.close()
    return {}


async def sync(kind: str, node: str, services: int) -> dict:
    clean()
    started = time.monotonic()
    proc = start(kind, node)
    try:
        count, seconds = await first_full_sync(kind, proc, 2400)
        ready = time.monotonic() - started
        programmed = virtual_servers()
    finally:
        stop(proc)
    clean()
    if programmed < services:
        raise RuntimeError(f"{kind} programmed {programmed} virtual servers, not {services}:\n{log_tail(kind)}")
    return {"sync": seconds / count, "ready": ready, "virtual_servers": programmed}


async def profile(node: str, services: int) -> dict:
    """pykubelet's first full sync again, under cProfile (its main thread: the event loop, which
    does the netlink work); the functions that took the most time, cumulative and own."""
    clean()
    proc = start("pykubelet", node, PROFILE)
    try:
        count, seconds = await first_full_sync("pykubelet", proc, 2400)
        proc.send_signal(signal.SIGINT)  # cProfile writes its file on the way out
        await asyncio.to_thread(proc.wait, 300)
    finally:
        stop(proc)
    clean()
    out = io.StringIO()
    stats = pstats.Stats(PROFILE, stream=out).strip_dirs()
    stats.sort_stats("cumulative").print_stats(35)
    stats.sort_stats("tottime").print_stats(25)
    return {"sync": seconds / count, "stats": out.getvalue()}


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("step", choices=("setup", "latency", "bulk", "sync", "profile"))
    parser.add_argument("--kind", choices=tuple(PROXIES))
    parser.add_argument("--node", default="")
    parser.add_argument("--label", default="")
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--services", type=int, default=1000)
    args = parser.parse_args()
    progress(f"{args.step} {args.kind or ''}")
    if args.step == "setup":
        out = await setup()
    elif args.step == "latency":
        out = await latency(args.kind, args.node, args.label, args.count)
    elif args.step == "bulk":
        out = await bulk(args.services)
    elif args.step == "sync":
        out = await sync(args.kind, args.node, args.services)
    else:
        out = await profile(args.node, args.services)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
