"""Pod startup benchmark: the CRI floor vs pykubelet, measured in the same run.

    python -m tests.bench.startup [--pods 20] [--containerd-log PATH]

(a) floor: RunPodSandbox + CreateContainer + StartContainer for busybox, called directly;
(b) pykubelet: a static manifest written -> its container seen RUNNING through CRI.
Prints p50/p95 and the ratio to the floor, with the machine's details; then (b) split into
steps: the agent's own gaps (the manifest written -> its RunPodSandbox, between the calls) and
the runtime's calls, from the times containerd logs each CRI call with (--containerd-log, the
test bed's by default; the split is left out when it cannot be read).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import pathlib
import platform
import re
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
CONTAINERD_LOG = "/var/log/pykubelet/containerd.log"  # where tests/bed starts containerd's output


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


async def measure_pykubelet(cri: CRIClient, count: int, workdir: pathlib.Path,
                            marks: dict[str, tuple[float, float]] | None = None) -> list[float]:
    """Each pod's manifest written -> running; `marks` gets each pod's (written, seen) wall times."""
    manifests = workdir / "manifests"
    manifests.mkdir()
    agent = AgentProcess(workdir, manifests, "--network-mode", "runtime").start()  # the floor's network
    try:
        await wait_for(lambda: agent.pods() is not None, 30, "the agent to answer", describe=agent.describe)
        times = []
        for i in range(count):
            name = f"bench{i}-{NODE}"
            start, written = time.perf_counter(), time.time()
            write_manifest(manifests, f"bench{i}", pod_manifest(f"bench{i}", "sleep 3600"))

            async def running():
                return any(c.state == api.CONTAINER_RUNNING
                           for c in await cri.list_containers({"io.kubernetes.pod.name": name}))
            await wait_for(running, 30, f"{name} running", interval=POLL, describe=agent.describe)
            times.append(time.perf_counter() - start)
            if marks is not None:
                marks[name] = (written, time.time())
        for path in manifests.iterdir():
            path.unlink()
        await wait_for(lambda: agent.pods() == {}, 60, "every bench pod removed", describe=agent.describe)
        return times
    finally:
        agent.stop()


STEPS = ("written -> RunPodSandbox asked", "RunPodSandbox (runtime)", "-> CreateContainer asked",
         "CreateContainer (runtime)", "-> StartContainer asked", "StartContainer (runtime)",
         "-> seen running (the 5 ms poll)")
_LOGGED_AT = re.compile(r'time="(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\.(\d+)Z"')


def _logged_at(line: str) -> float:
    whole, fraction = _LOGGED_AT.search(line).groups()  # type: ignore[union-attr]
    return datetime.datetime.fromisoformat(whole).replace(tzinfo=datetime.timezone.utc).timestamp() + \
        float(f"0.{fraction}")


def _call(lines: list[str], asked: str, returned_id: str | None = None) -> tuple[float, float, str]:
    """When containerd logged the call whose request line contains `asked`, when it returned, and
    the id it returned (`returns <returned_id> id "..."`)."""
    request = next(line for line in lines if asked in line and " returns " not in line)
    response = next(line for line in lines if asked in line and " returns " in line)
    found = re.search(rf'returns {returned_id} id \\"([0-9a-f]+)', response) if returned_id else None
    return _logged_at(request), _logged_at(response), found.group(1) if found else ""


def steps(log: list[str], marks: dict[str, tuple[float, float]]) -> list[list[float]]:
    """Per pod, the seconds of each of STEPS, from containerd's log lines of its calls."""
    split = []
    for name, (written, seen) in marks.items():
        sandbox_asked, sandbox_done, sandbox = _call(log, f"RunPodSandbox for &PodSandboxMetadata{{Name:{name},",
                                                     "sandbox")
        create_asked, create_done, container = _call(log, f'CreateContainer within sandbox \\"{sandbox}\\"',
                                                     "container")
        start_asked, start_done, _ = _call(log, f'StartContainer for \\"{container}\\"')
        times = [written, sandbox_asked, sandbox_done, create_asked, create_done, start_asked, start_done, seen]
        split.append([after - before for before, after in zip(times, times[1:])])
    return split


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
    parser.add_argument("--containerd-log", default=CONTAINERD_LOG)
    args = parser.parse_args()
    count = args.pods
    log_offset = os.path.getsize(args.containerd_log) if os.path.exists(args.containerd_log) else None
    marks: dict[str, tuple[float, float]] = {}
    async with CRIClient(ENDPOINT) as cri:
        await remove_test_pods(cri)
        with tempfile.TemporaryDirectory(prefix="pykubelet-bench-") as tmp:
            # The floor and pykubelet both get the network containerd runs itself (runtime mode);
            # tests.bench.network compares that with agent mode.
            network = assets.render("pod-network.conflist", bridge="pkl0", pod_cidr=STANDALONE_POD_CIDR,
                                    ipam_dir=os.path.join(tmp, "ipam"))
            assets.write_conflist("/etc/cni/net.d", network)
            floor = await measure_floor(cri, count, os.path.join(tmp, "floor-logs"))
            ours = await measure_pykubelet(cri, count, pathlib.Path(tmp), marks)
    rows = [("CRI floor: RunPodSandbox+Create+Start", floor),
            ("pykubelet: manifest written -> running", ours)]
    base = statistics.median(floor)
    print(f"\nPod startup, {count} busybox pods one at a time (ms); {machine()}")
    print(f"{'':42} {'p50':>8} {'p95':>8} {'mean':>8} {'p50 ratio':>10} {'p50 - floor':>12}")
    for label, values in rows:
        p50 = statistics.median(values)
        print(f"{label:42} {p50 * 1e3:8.0f} {percentile(values, 0.95) * 1e3:8.0f} "
              f"{statistics.mean(values) * 1e3:8.0f} {p50 / base:9.2f}x {(p50 - base) * 1e3:+11.0f}")
    if log_offset is not None:
        with open(args.containerd_log, errors="replace") as f:
            f.seek(log_offset)
            split = steps(f.readlines(), marks)
        print(f"\npykubelet's starts split by containerd's log of each call (ms, median (min-max) of {count})")
        for i, step in enumerate(STEPS):
            values = [pod[i] * 1e3 for pod in split]
            print(f"{step:42} {statistics.median(values):8.1f} ({min(values):.1f}-{max(values):.1f})")
        agents = [(pod[0] + pod[2] + pod[4]) * 1e3 for pod in split]
        label = "the agent's own gaps (the three asked rows)"
        print(f"{label:42} {statistics.median(agents):8.1f} ({min(agents):.1f}-{max(agents):.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
