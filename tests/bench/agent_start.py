"""Agent start-up: exec -> /healthz answering 200, pykubelet vs the real kubelet, same run.

    python -m tests.bench.agent_start [--runs 5] [--idle 10] [--modes standalone,kubeconfig]

Each agent is started, /healthz polled until it answers 200, its RSS and the CPU it has used read
then (the CPU row says what the wall time means on a loaded machine), its RSS again after --idle
seconds, and the agent stopped. (a) standalone: a static pod directory (empty), no apiserver;
(b) kubeconfig: a node of the test control plane. Both on the same containerd, as
tests/bench/cluster_startup.py starts them (pykubelet runs its network in runtime mode, as the
kubelet does). Each agent keeps its root directory from run to run, so every measured start is a
restart of a node that has run before (as `systemctl restart kubelet`), after one start of each
that is not counted (its first start writes its certificates; the page cache warms). The runs
rotate: each agent goes first in turn.

pykubelet runs as `python -m pykubelet.cli` from this tree, its bytecode compiled first (as pip
does when it installs the wheel). --before PATH adds a third agent: pykubelet from the source tree
at PATH (a checkout of an earlier commit), so that a change is measured against what it changed
under the same load.
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import contextlib
import http.client
import os
import pathlib
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field

from pykubelet.config import STANDALONE_POD_CIDR
from pykubelet.cri.client import CRIClient
from pykubelet.network import assets
from tests.bench.cluster_startup import BIN, CNI_CONF_DIR, NodeAgent
from tests.bench.density import cpu_seconds, memory_kib
from tests.bench.startup import machine
from tests.cluster.conftest import control_plane
from tests.runtime.conftest import ENDPOINT, remove_test_pods

REPO = pathlib.Path(__file__).resolve().parents[2]
BEFORE = "pykubelet-before"  # the kind (and node name) of the --before agent
POLL = 0.005  # between /healthz attempts: the resolution of the measure


@dataclass
class Starts:
    healthz_s: list[float] = field(default_factory=list)
    cpu_at_healthz_s: list[float] = field(default_factory=list)  # user + system, all threads
    rss_at_healthz_mib: list[float] = field(default_factory=list)
    rss_idle_mib: list[float] = field(default_factory=list)


def healthz_ok(port: int) -> bool:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
    try:
        connection.request("GET", "/healthz")
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()


def start_once(agent: NodeAgent, idle: float, out: Starts, tree: pathlib.Path) -> None:
    """One start, from the source tree `tree` for pykubelet: exec -> /healthz 200 (polled every
    POLL s, each try a new connection), the agent's CPU and RSS then, its RSS after `idle`
    seconds, then it is stopped."""
    with contextlib.chdir(tree):  # `python -m` imports pykubelet from the current directory
        agent.start()
    try:
        deadline = agent.started_at + 120
        while not healthz_ok(agent.healthz_port):
            agent.check_alive()
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{agent.kind}: no /healthz 200 within 120 s:\n{agent.log_tail()}")
            time.sleep(POLL)
        answered = time.perf_counter() - agent.started_at
        cpu, rss = cpu_seconds(agent.proc.pid), memory_kib(agent.proc.pid, "VmRSS") / 1024
        time.sleep(idle)  # the idle window itself, not a wait for anything
        agent.check_alive()
        out.healthz_s.append(answered)
        out.cpu_at_healthz_s.append(cpu)
        out.rss_at_healthz_mib.append(rss)
        out.rss_idle_mib.append(memory_kib(agent.proc.pid, "VmRSS") / 1024)
    finally:
        agent.stop()


async def clean_runtime() -> None:
    async with CRIClient(ENDPOINT) as cri:
        await remove_test_pods(cri)


def measure(mode: str, args: argparse.Namespace, workdir: pathlib.Path) -> dict[str, Starts]:
    trees = {"kubelet": REPO, "pykubelet": REPO, **({BEFORE: args.before} if args.before else {})}
    kinds = list(trees)
    agents = {kind: NodeAgent(kind, workdir / f"{mode}-{kind}", standalone=mode == "standalone") for kind in kinds}
    for agent in agents.values():
        agent.workdir.mkdir()
    results = {kind: Starts() for kind in kinds}
    for kind in kinds:  # the uncounted first start of each
        print(f"  {mode}: first start of {kind} (not counted)", flush=True)
        start_once(agents[kind], 0, Starts(), trees[kind])
    for run in range(args.runs):
        for kind in kinds[run % len(kinds):] + kinds[:run % len(kinds)]:  # each first in turn
            start_once(agents[kind], args.idle, results[kind], trees[kind])
            print(f"  {mode} run {run + 1}/{args.runs}: {kind} /healthz after "
                  f"{results[kind].healthz_s[-1] * 1e3:.0f} ms", flush=True)
    asyncio.run(clean_runtime())
    return results


def spread(values: list[float], scale: float = 1.0, digits: int = 0) -> str:
    return f"{statistics.median(values) * scale:.{digits}f} ({min(values) * scale:.{digits}f}–{max(values) * scale:.{digits}f})"


def table(mode: str, results: dict[str, Starts], args: argparse.Namespace) -> None:
    base = results["kubelet"]
    columns = ["pykubelet", BEFORE] if BEFORE in results else ["pykubelet"]
    rows = (("exec → /healthz 200, ms", "healthz_s", 1e3, 0),
            ("CPU used by then (user + system), ms", "cpu_at_healthz_s", 1e3, 0),
            ("RSS when /healthz answers, MiB", "rss_at_healthz_mib", 1, 1),
            (f"RSS after {args.idle:g} s idle, MiB", "rss_idle_mib", 1, 1))
    print(f"\n{mode}: median (min–max) of {args.runs} starts, each agent first in turn")
    print(f"| {mode} | kubelet | " + " | ".join(f"{c} | ratio" for c in columns) + " |")
    print("|---|---:|" + "---:|---:|" * len(columns))
    for label, key, scale, digits in rows:
        b = getattr(base, key)
        cells = [f"{spread(getattr(results[c], key), scale, digits)} | "
                 f"{statistics.median(getattr(results[c], key)) / statistics.median(b):.2f}×" for c in columns]
        print(f"| {label} | {spread(b, scale, digits)} | " + " | ".join(cells) + " |")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--idle", type=float, default=10.0)
    parser.add_argument("--modes", default="standalone,kubeconfig")
    parser.add_argument("--before", type=pathlib.Path, help="also pykubelet from this source tree")
    args = parser.parse_args()
    modes = args.modes.split(",")
    load_before = os.getloadavg()
    for tree in (REPO, args.before) if args.before else (REPO,):
        compileall.compile_dir(tree / "pykubelet", quiet=1)
    asyncio.run(clean_runtime())
    network_dir = tempfile.mkdtemp(prefix="pykubelet-bench-ipam-")
    assets.write_conflist(CNI_CONF_DIR, assets.render("pod-network.conflist", bridge="pkl0",
                                                      pod_cidr=STANDALONE_POD_CIDR, ipam_dir=network_dir))
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="pykubelet-bench-start-"))
    results = {}
    try:
        for mode in modes:
            results[mode] = measure(mode, args, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(network_dir, ignore_errors=True)
    load = "/".join(f"{a:.1f}→{b:.1f}" for a, b in zip(load_before, os.getloadavg()))
    print(f"\nAgent start-up; {machine()}, kubelet {BIN / 'kubelet'} (v1.36.3); "
          f"load average 1/5/15 min, start→end of the run: {load}")
    for mode in modes:
        table(mode, results[mode], args)
    return 0


if __name__ == "__main__":
    with control_plane():
        sys.exit(main())
