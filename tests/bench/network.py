"""Pod network benchmark: sandbox creation and teardown in agent mode vs runtime mode.

    python -m tests.bench.network [--pods 20]

For each mode a node of its own (a network namespace and a containerd of its own) and the
agent's real network code (NetworkManager: in agent mode the shim's socket, the CNI chain,
the pyroute2 check and the record; in runtime mode the conflist containerd runs itself).
On each node, in the same run: RunPodSandbox for hostNetwork pods (no CNI at all: the
baseline) and for pod-network pods, then StopPodSandbox + RemovePodSandbox. The network's
cost per pod is the difference of the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

from pykubelet.api.pod import parse_pod
from pykubelet.config import NetworkSettings
from pykubelet.cri.client import CRIClient
from pykubelet.network.manager import NetworkManager
from pykubelet.runtime import specs
from tests.bench.startup import machine, percentile
from tests.helpers import wait_for
from tests.multinode.conftest import CONTAINERD_NODE, host_network_down, host_network_up, lan_up
from tests.runtime.conftest import pod_manifest

POD_CIDR = "10.99.0.0/24"


async def sandbox_times(cri: CRIClient, count: int, host_network: bool, logs: str) -> tuple[list[float], list[float]]:
    create, teardown = [], []
    for i in range(count):
        manifest = pod_manifest(f"net{i}", "sleep 3600")
        manifest["metadata"].update(name=f"bench-{'host' if host_network else 'pod'}-{i}", uid=f"bench-{i}")
        manifest["spec"]["hostNetwork"] = host_network
        config = specs.sandbox_config(parse_pod(manifest, "bench"), 0, logs)
        os.makedirs(config.log_directory, exist_ok=True)
        start = time.perf_counter()
        sandbox_id = await cri.run_pod_sandbox(config)
        create.append(time.perf_counter() - start)
        start = time.perf_counter()
        await cri.stop_pod_sandbox(sandbox_id)
        await cri.remove_pod_sandbox(sandbox_id)
        teardown.append(time.perf_counter() - start)
    return create, teardown


async def measure(mode: str, count: int, workdir: pathlib.Path) -> dict[str, list[float]]:
    node = f"pkl-bench-{mode[0]}"
    host_network_up(node, "10.250.0.250")
    subprocess.run(["bash", str(CONTAINERD_NODE), "down", node], capture_output=True)
    endpoint = subprocess.run(["bash", str(CONTAINERD_NODE), "up", node, "--netns", node], check=True,
                              capture_output=True, text=True).stdout.strip().splitlines()[-1]
    state = pathlib.Path("/run/pykubelet-nodes") / node
    settings = NetworkSettings(mode=mode, pod_cidr=POD_CIDR, write_runtime_config=mode == "runtime",
                               cni_conf_dir=str(state / "net.d"), socket=str(state / "cni.sock"), host_netns=node)
    cri = CRIClient(endpoint)
    network = NetworkManager(settings, cri, str(workdir / mode), node, kube=None)
    task = asyncio.create_task(network.run())
    try:
        await wait_for(network.ready.is_set, 30, f"{mode} mode network configured")

        async def network_ready() -> bool:
            status = await cri.status()
            return any(c.type == "NetworkReady" and c.status for c in status.status.conditions)
        await wait_for(network_ready, 30, "containerd to report NetworkReady")
        logs = str(workdir / "logs")
        await sandbox_times(cri, 3, False, logs)  # warm-up: the bridge, iptables chains, page cache
        host_create, host_teardown = await sandbox_times(cri, count, True, logs)
        pod_create, pod_teardown = await sandbox_times(cri, count, False, logs)
        return {"host_create": host_create, "host_teardown": host_teardown,
                "pod_create": pod_create, "pod_teardown": pod_teardown}
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await cri.close()
        subprocess.run(["bash", str(CONTAINERD_NODE), "down", node], capture_output=True)
        host_network_down(node)


def ms(values: list[float], q: float | None = None) -> str:
    return f"{(statistics.median(values) if q is None else percentile(values, q)) * 1e3:8.1f}"


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=20)
    args = parser.parse_args()
    lan_up()
    results = {}
    with tempfile.TemporaryDirectory(prefix="pykubelet-bench-net-") as tmp:
        for mode in ("agent", "runtime"):
            results[mode] = await measure(mode, args.pods, pathlib.Path(tmp))
    print(f"# pod network: {args.pods} sandboxes per kind, one at a time ({machine()})")
    print(f"{'mode':8} {'kind':13} {'create p50':>10} {'p95':>8} {'teardown p50':>12} {'p95':>8}")
    for mode, r in results.items():
        for kind in ("host", "pod"):
            label = "hostNetwork" if kind == "host" else "pod network"
            print(f"{mode:8} {label:13} {ms(r[kind + '_create']):>10} {ms(r[kind + '_create'], 0.95)} "
                  f"{ms(r[kind + '_teardown']):>12} {ms(r[kind + '_teardown'], 0.95)}")
    print(f"\n{'mode':8} {'network setup p50 (pod - hostNetwork)':>40} {'teardown':>10} {'vs runtime':>11}")
    base = statistics.median(results["runtime"]["pod_create"]) - statistics.median(results["runtime"]["host_create"])
    for mode, r in results.items():
        setup = statistics.median(r["pod_create"]) - statistics.median(r["host_create"])
        down = statistics.median(r["pod_teardown"]) - statistics.median(r["host_teardown"])
        print(f"{mode:8} {setup * 1e3:37.1f} ms {down * 1e3:7.1f} ms {setup / base:10.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
