"""What the Service proxy benchmarks measure and print, shared by tests/bench/proxy.py (on this
machine, a network namespace per proxy) and tests/bench/vm_proxy.py (inside a VM, for the IPVS
mode). Only the standard library and pykubelet: it runs with the VM's pykubelet venv too.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import statistics
import threading
import time

from pykubelet.kube import errors
from pykubelet.kube.client import KubeClient

NAMESPACE = "t-bench-proxy"
METRICS = "127.0.0.1:10249"
SERVER_IP, SERVER_PORT = "10.244.99.10", 8080  # the latency test's endpoint: a listener on the node
ENDPOINTS_PER_SERVICE = 10


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


async def delete_services(kube: KubeClient) -> None:
    """Every Service of the namespace and its EndpointSlices gone (the latency test's, before the bulk)."""
    await kube.delete(f"/apis/discovery.k8s.io/v1/namespaces/{NAMESPACE}/endpointslices")
    for name in [s["metadata"]["name"] for s in
                 (await kube.get(f"/api/v1/namespaces/{NAMESPACE}/services"))["items"]]:
        await kube.delete(f"/api/v1/namespaces/{NAMESPACE}/services/{name}")


# --- the proxy's metrics

FULL_SYNC = "kubeproxy_sync_full_proxy_rules_duration_seconds"


def full_syncs(page: str, histogram: str = FULL_SYNC) -> tuple[int, float]:
    """(count, total seconds) of the IPv4 syncs a /metrics page reports in `histogram` (the full ones)."""
    def value(name: str) -> float:
        m = re.search(rf'^{name}{{ip_family="IPv4"}} (\S+)$', page, re.M)
        return float(m.group(1)) if m else 0.0
    return int(value(f"{histogram}_count")), value(f"{histogram}_sum")


# --- Service created -> first connection

def first_connection(ip: str, port: int, deadline: float, netns_fd: int | None = None) -> float | None:
    """Connect every few milliseconds until a connection is accepted (from a thread inside the
    network namespace netns_fd when given); the monotonic time it was, or None at the deadline."""
    done: list[float | None] = [None]

    def run() -> None:
        if netns_fd is not None:
            from pyroute2.netns import setns
            setns(netns_fd)  # this thread only
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


async def measure_latency(kube: KubeClient, label: str, count: int, listener: socket.socket,
                          netns: str | None = None) -> list[float]:
    """Seconds from a Service's creation to the first connection through its cluster IP, for `count`
    Services one after the other. `listener`: the endpoint (SERVER_IP:SERVER_PORT), closed at the end."""
    listener.setblocking(True)

    def drain() -> None:
        while True:
            try:
                listener.accept()[0].close()
            except OSError:
                return  # closed: the measurement is over
    threading.Thread(target=drain, daemon=True).start()
    fd = os.open(f"/var/run/netns/{netns}", os.O_RDONLY) if netns else None
    out = []
    try:
        for i in range(count):
            await asyncio.sleep(2)  # let the previous change settle: each Service starts from a quiet proxy
            name = f"lat-{label}-{i}"
            started = time.monotonic()
            created = await kube.create(f"/api/v1/namespaces/{NAMESPACE}/services", service(name))
            await kube.create(f"/apis/discovery.k8s.io/v1/namespaces/{NAMESPACE}/endpointslices",
                              endpoint_slice(name, [SERVER_IP]))
            ip = created["spec"]["clusterIP"]
            reached = await asyncio.to_thread(first_connection, ip, 80, started + 30, fd)
            if reached is None:
                raise RuntimeError(f"{label}: no connection to {name} ({ip}) within 30 s")
            out.append(reached - started)
    finally:
        if fd is not None:
            os.close(fd)
        listener.close()
    return out


# --- the tables

def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def latency_table(rows: list[tuple[str, list[float], list[float]]]) -> str:
    """rows: (mode, kube-proxy's seconds, pykubelet's seconds)."""
    lines = ["| mode | kube-proxy p50 | kube-proxy p95 | pykubelet p50 | pykubelet p95 | p50 ratio |",
             "|---|---:|---:|---:|---:|---:|"]
    for mode, kp, ours in rows:
        lines.append(f"| {mode} | {statistics.median(kp) * 1000:.0f} | {pct(kp, 0.95) * 1000:.0f} | "
                     f"{statistics.median(ours) * 1000:.0f} | {pct(ours, 0.95) * 1000:.0f} | "
                     f"{statistics.median(ours) / statistics.median(kp):.2f}× |")
    return "\n".join(lines)


def sync_table(rows: list[tuple[str, int, tuple[float, float], tuple[float, float]]]) -> str:
    """rows: (mode, Services, kube-proxy's (sync, start -> synced), pykubelet's), in seconds."""
    lines = ["| mode | Services | kube-proxy | pykubelet | ratio |", "|---|---:|---:|---:|---:|"]
    for mode, services, (kp, kp_ready), (ours, ours_ready) in rows:
        lines.append(f"| {mode} | {services:,} | {kp:.3f} ({kp_ready:.1f}) | {ours:.3f} ({ours_ready:.1f}) | "
                     f"{ours / kp:.2f}× |")
    return "\n".join(lines)
