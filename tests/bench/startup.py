"""Pod startup benchmark: the CRI floor vs pykubelet, measured in the same run.

    python -m tests.bench.startup [--pods 20]

(a) floor: RunPodSandbox + CreateContainer + StartContainer for busybox, called directly;
(b) pykubelet: a static manifest written -> its container seen RUNNING through CRI.
Prints p50/p95 and the ratio to the floor, with the machine's details.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
import time

from pykubelet.api.pod import parse_pod
from pykubelet.config import STANDALONE_POD_CIDR
from pykubelet.cri.client import CRIClient
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.network import assets
from pykubelet.runtime import specs
from tests.helpers import wait_for
from tests.runtime.conftest import ENDPOINT, NODE, AgentProcess, pod_manifest, remove_test_pods, write_manifest

POLL = 0.005


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def measure_floor(cri: CRIClient, count: int, logs: str) -> list[float]:
    times = []
    for i in range(count):
        manifest = pod_manifest(f"floor{i}", "sleep 3600")
        manifest["metadata"].update(name=f"floor{i}-{NODE}", uid=f"bench-floor-{i}")
        pod = parse_pod(manifest, "bench")
        start = time.perf_counter()
        sandbox_config = specs.sandbox_config(pod, 0, logs)
        os.makedirs(sandbox_config.log_directory, exist_ok=True)
        sandbox_id = await cri.run_pod_sandbox(sandbox_config)
        image = await cri.image_status(pod.containers[0].image)
        config = specs.container_config(pod, pod.containers[0], image.id, 0)
        container_id = await cri.create_container(sandbox_id, config, sandbox_config)
        await cri.start_container(container_id)
        times.append(time.perf_counter() - start)
    await remove_test_pods(cri)
    return times


async def measure_pykubelet(cri: CRIClient, count: int, workdir: pathlib.Path) -> list[float]:
    manifests = workdir / "manifests"
    manifests.mkdir()
    agent = AgentProcess(workdir, manifests, "--network-mode", "runtime").start()  # the floor's network
    try:
        await wait_for(lambda: agent.pods() is not None, 30, "the agent to answer", describe=agent.describe)
        times = []
        for i in range(count):
            name = f"bench{i}-{NODE}"
            start = time.perf_counter()
            write_manifest(manifests, f"bench{i}", pod_manifest(f"bench{i}", "sleep 3600"))

            async def running():
                return any(c.state == api.CONTAINER_RUNNING
                           for c in await cri.list_containers({"io.kubernetes.pod.name": name}))
            await wait_for(running, 30, f"{name} running", interval=POLL, describe=agent.describe)
            times.append(time.perf_counter() - start)
        for path in manifests.iterdir():
            path.unlink()
        await wait_for(lambda: agent.pods() == {}, 60, "every bench pod removed", describe=agent.describe)
        return times
    finally:
        agent.stop()


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    containerd = subprocess.run(["containerd", "--version"], capture_output=True, text=True).stdout.split()
    return (f"{os.cpu_count()} vCPU {cpu}, {mem_gib:.0f} GiB, kernel {platform.release()}, "
            f"containerd {containerd[2] if len(containerd) > 2 else '?'}, Python {platform.python_version()}")


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, default=20)
    count = parser.parse_args().pods
    async with CRIClient(ENDPOINT) as cri:
        await remove_test_pods(cri)
        with tempfile.TemporaryDirectory(prefix="pykubelet-bench-") as tmp:
            # The floor and pykubelet both get the network containerd runs itself (runtime mode);
            # tests.bench.network compares that with agent mode.
            network = assets.render("pod-network.conflist", bridge="pkl0", pod_cidr=STANDALONE_POD_CIDR,
                                    ipam_dir=os.path.join(tmp, "ipam"))
            assets.write_conflist("/etc/cni/net.d", network)
            floor = await measure_floor(cri, count, os.path.join(tmp, "floor-logs"))
            ours = await measure_pykubelet(cri, count, pathlib.Path(tmp))
    rows = [("CRI floor: RunPodSandbox+Create+Start", floor),
            ("pykubelet: manifest written -> running", ours)]
    base = statistics.median(floor)
    print(f"\nPod startup, {count} busybox pods one at a time (ms); {machine()}")
    print(f"{'':42} {'p50':>8} {'p95':>8} {'mean':>8} {'p50 ratio':>10} {'p50 - floor':>12}")
    for label, values in rows:
        p50 = statistics.median(values)
        print(f"{label:42} {p50 * 1e3:8.0f} {percentile(values, 0.95) * 1e3:8.0f} "
              f"{statistics.mean(values) * 1e3:8.0f} {p50 / base:9.2f}x {(p50 - base) * 1e3:+11.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
