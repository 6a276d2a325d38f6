"""Density at maxPods: 110 pods at once on one node, pykubelet vs the real kubelet, same run.

    python -m tests.bench.density [--pods 110] [--max-pods N] [--idle 60] [--skip-standalone]
                                  [--runs N] [--probe [--trace]]

For each agent, on the same containerd (both with containerd running the pod network, as in
tests/bench/cluster_startup.py):
- cluster: the agent's RSS idle, Ready with no pods; 110 pods created through the API at once;
  time until all are Running, each pod's create -> Running, the agent's peak RSS and CPU seconds
  during that ramp; then its CPU and RSS while the 110 pods just run (--idle seconds), how much
  of that RSS is anonymous (the heap, not the mapped binaries and libraries) and its threads;
  then all deleted, time until all are gone.
- standalone: 110 static pods written at once; time until every container runs (from CRI).

--runs N: N rounds of the cluster part, alternating which agent goes first (the kubelet in the
  first), a table per round and one line per round of the ratios at the end.
Every ramp also takes the CPU that containerd (with the CNI plugins it ran), its shims (with runc),
kube-apiserver and etcd spent during it: where the ramp is the runtime's, their CPU shows it.
--max-pods: maxPods of both agents (the kubelet's config, pykubelet's --max-pods); default each
  one's own (110), which --pods above 110 needs raised.
--probe: pykubelet runs under tests/bench/agent_probe.py; with no pods, at the pods and after
  they are gone, its memory seen from inside (malloc's bytes in use and free per arena, RSS after
  malloc_trim, the objects per type; with --trace tracemalloc's bytes per line, which inflates
  the RSS it reports).
"""

from __future__ import annotations

import argparse
import collections
import json
import asyncio
import os
import pathlib
import shutil
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field

import yaml

from pykubelet.config import STANDALONE_POD_CIDR
from pykubelet.cri.client import CRIClient
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.kube.client import KubeClient
from pykubelet.network import assets
from tests.bench.cluster_startup import CNI_CONF_DIR, NodeAgent, Watcher, pod, ready_untainted
from tests.bench.startup import machine, percentile
from tests.cluster.conftest import ADMIN, control_plane, kubectl
from tests.helpers import wait_for
from tests.runtime.conftest import BUSYBOX, ENDPOINT, remove_test_pods

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
RUNTIME_SOCKET = ENDPOINT.removeprefix("unix://")
# The processes whose CPU a ramp is also measured in: the runtime (the one serving ENDPOINT, and
# every shim it started) and the control plane.
SHIM = "containerd-shim"
CONTROL_PLANE = ("kube-apiserver", "etcd")
RAMP_ROWS = {"containerd": "containerd + CNI plugins", "shims": "shims + runc"}


def cpu_seconds(pid: int, children: bool = False) -> float:
    """utime + stime; with children, also what its ended children used (runc under a shim, the
    CNI plugins under containerd: processes too short-lived to be seen running)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    used = int(fields[11]) + int(fields[12])
    if children:
        used += int(fields[13]) + int(fields[14])  # cutime + cstime
    return used / CLOCK_TICKS


def memory_kib(pid: int, key: str) -> int:
    """VmRSS (now), VmHWM (peak), RssAnon (the heap) or Threads (a count) of a process, KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def _comm(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:  # gone meanwhile
        return ""


def _listener_of(socket_path: str) -> str | None:
    """The pid of the process holding the listening unix socket bound to socket_path."""
    with open("/proc/net/unix") as f:
        inodes = {f"socket:[{fields[6]}]" for fields in (line.split() for line in f)
                  if len(fields) > 7 and fields[7] == socket_path}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") in inodes for fd in os.listdir(f"/proc/{pid}/fd")):
                return pid
        except OSError:
            continue
    return None


def others_cpu() -> dict[str, float]:
    """CPU seconds so far of containerd (the one serving ENDPOINT) and all its shims together,
    each with its ended children (the CNI plugins; runc), and the control plane's processes."""
    found = {name: 0.0 for name in ("containerd", "shims", *CONTROL_PLANE)}
    runtime = _listener_of(RUNTIME_SOCKET)
    for pid in filter(str.isdigit, os.listdir("/proc")):
        comm = _comm(pid)
        key = ("containerd" if pid == runtime else "shims" if comm.startswith(SHIM)
               else comm if comm in CONTROL_PLANE else None)
        if key is not None:
            try:
                found[key] += cpu_seconds(int(pid), children=key in ("containerd", "shims"))
            except (OSError, IndexError):
                continue
    return found


@dataclass
class Density:
    all_running_s: float = 0.0
    per_pod_s: list[float] = field(default_factory=list)
    ramp_cpu_s: float = 0.0
    ramp_peak_rss_mib: float = 0.0
    idle_cpu_percent: float = 0.0
    idle_rss_mib: float = 0.0
    idle_anon_mib: float = 0.0
    idle_threads: int = 0
    no_pods_rss_mib: float = 0.0
    all_gone_s: float = 0.0
    others_ramp_cpu_s: dict[str, float] = field(default_factory=dict)  # containerd, shims, control plane
    probes: dict[str, list[dict]] = field(default_factory=dict)  # moment -> [as it was, after malloc_trim]


async def probe_memory(agent: NodeAgent, directory: pathlib.Path) -> list[dict]:
    """The agent's memory from inside (tests/bench/agent_probe.py): as it is, then after malloc_trim."""
    found = []
    for sig in (signal.SIGUSR1, signal.SIGUSR2):
        path = directory / f"{len(list(directory.glob('*.json'))) + 1}.json"
        agent.proc.send_signal(sig)
        await wait_for(path.exists, 60, f"the probe's {path.name}", interval=0.05)
        found.append(json.loads(path.read_text()))
    return found


def show_probes(probes: dict[str, list[dict]], pods: int) -> None:
    print(f"\npykubelet's memory from inside (MiB; RSS after malloc_trim(0) in the last column)")
    print(f"{'moment':14} {'RSS':>7} {'anon':>7} {'file':>7} {'malloc used':>11} {'free held':>9} "
          f"{'threads':>7} {'RSS trimmed':>11}")
    for moment, (now, trimmed) in probes.items():
        print(f"{moment:14} {now['VmRSS_mib']:7.1f} {now['RssAnon_mib']:7.1f} {now['RssFile_mib']:7.1f} "
              f"{now['malloc_in_use_mib']:11.1f} {now['malloc_free_held_mib']:9.1f} {len(now['threads']):7d} "
              f"{trimmed['VmRSS_mib']:11.1f}")
    first, last = probes["no pods"][0], probes[f"{pods} pods"][0]
    print(f"threads at {pods} pods: {collections.Counter(n.rstrip('0123456789_') for n in last['threads'])}")
    for moment, (now, trimmed) in probes.items():
        print(f"malloc arenas at {moment} (mapped/free MiB): " + ", ".join(
            f"{a['mapped'] / 2**20:.1f}/{a['free'] / 2**20:.1f}" for a in now["arenas"]))
    objects = collections.Counter(dict(last["objects"]))
    objects.subtract(dict(first["objects"]))
    print(f"objects per pod, no pods -> {pods} pods (of the 40 most numerous types): " + ", ".join(
        f"{name} {count / pods:.1f}" for name, count in objects.most_common(20)))
    if "by_line" in last:
        grown = collections.Counter(dict(last["by_line"]))
        grown.subtract(dict(first["by_line"]))
        print(f"traced {first['traced_mib']:.1f} -> {last['traced_mib']:.1f} MiB; most grown lines (KiB per pod):")
        for where, size in grown.most_common(25):
            print(f"  {size / 1024 / pods:7.2f}  {where.split('site-packages/')[-1].split('/pykubelet/')[-1]}")


async def cluster_density(kind: str, kube: KubeClient, cri: CRIClient, args: argparse.Namespace,
                          workdir: pathlib.Path, round_: int = 1) -> Density:
    probe_dir = workdir / "probe"
    probe_env = None
    if args.probe and kind == "pykubelet":
        probe_dir.mkdir()
        probe_env = {"PYKUBELET_PROBE_DIR": str(probe_dir), "PYKUBELET_PROBE_TRACE": "1" if args.trace else "0"}
    agent = NodeAgent(kind, workdir, max_pods=args.max_pods, probe=probe_env)
    namespace = f"t-density-{kind}-{round_}"  # the last round's may still be terminating
    kubectl("create", "namespace", namespace, check=False)
    await wait_for(lambda: kubectl("get", "sa", "default", "-n", namespace, check=False).returncode == 0, 60,
                   "the default service account")
    agent.start()
    out = Density()
    watcher = Watcher(kube, namespace)
    watch = asyncio.create_task(watcher.run())
    path = f"/api/v1/namespaces/{namespace}/pods"
    try:
        await wait_for(lambda: ready_untainted(agent.node), 120, f"{agent.node} Ready without taints")
        pid = agent.proc.pid
        await asyncio.sleep(args.idle / 4)  # Ready with no pods: the measurement window itself
        out.no_pods_rss_mib = memory_kib(pid, "VmRSS") / 1024
        if probe_env:
            out.probes["no pods"] = await probe_memory(agent, probe_dir)
        print(f"  {kind}: creating {args.pods} pods at once", flush=True)
        cpu_before, others_before = cpu_seconds(pid), others_cpu()
        created: dict[str, float] = {}

        async def create(i: int) -> None:
            created[f"d-{i}"] = time.perf_counter()
            body = pod(f"d-{i}", namespace)
            body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": agent.node}
            await kube.create(path, body)
        start = time.perf_counter()
        await asyncio.gather(*(create(i) for i in range(args.pods)))
        def stuck() -> str:
            phases: dict[str, int] = {}
            for item in json.loads(kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)["items"]:
                phase = item.get("status", {}).get("phase", "?")
                phases[phase] = phases.get(phase, 0) + 1
            ended = f" (the watch ended: {watch.exception() if not watch.cancelled() else 'cancelled'})" \
                if watch.done() else ""
            return (f"the watch saw {len(watcher.running_at)} Running{ended}; the API has {phases}\n"
                    f"{kind}'s log:\n{agent.log_tail()}")
        def all_running() -> bool:
            agent.check_alive()
            return all(n in watcher.running_at for n in created)
        await wait_for(all_running, 600,
                       f"all {args.pods} pods Running", interval=0.05, describe=stuck)
        out.all_running_s = max(watcher.running_at.values()) - start
        out.per_pod_s = [watcher.running_at[n] - t for n, t in created.items()]
        out.ramp_cpu_s = cpu_seconds(pid) - cpu_before
        # The shims started during the ramp: all their CPU is the ramp's.
        out.others_ramp_cpu_s = {name: spent - others_before[name] for name, spent in others_cpu().items()}
        out.ramp_peak_rss_mib = memory_kib(pid, "VmHWM") / 1024
        print(f"  {kind}: all Running after {out.all_running_s:.1f}s; idling {args.idle}s", flush=True)
        idle_start, idle_cpu = time.perf_counter(), cpu_seconds(pid)
        await asyncio.sleep(args.idle)  # the measurement window itself, not a wait for anything
        out.idle_cpu_percent = 100 * (cpu_seconds(pid) - idle_cpu) / (time.perf_counter() - idle_start)
        out.idle_rss_mib = memory_kib(pid, "VmRSS") / 1024
        out.idle_anon_mib = memory_kib(pid, "RssAnon") / 1024
        out.idle_threads = memory_kib(pid, "Threads")
        if probe_env:
            out.probes[f"{args.pods} pods"] = await probe_memory(agent, probe_dir)
        start = time.perf_counter()
        kubectl("delete", "pods", "--all", "-n", namespace, "--wait=false")
        await wait_for(lambda: kubectl("get", "pods", "-n", namespace, "-o", "name", check=False).stdout == "",
                       600, "every pod gone from the API", interval=0.2)
        out.all_gone_s = time.perf_counter() - start
        if probe_env:
            await asyncio.sleep(args.idle / 4)  # the workers and their records end after the API's delete
            out.probes["all deleted"] = await probe_memory(agent, probe_dir)
    finally:
        watch.cancel()
        kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        agent.stop()
        await remove_test_pods(cri)
    return out


def static_pod(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "main", "image": BUSYBOX, "command": ["sleep", "3600"]}]}}


async def standalone_density(kind: str, cri: CRIClient, args: argparse.Namespace, workdir: pathlib.Path) -> Density:
    """110 static pods written at once; each pod's latency is its container's start time (CRI)."""
    agent = NodeAgent(kind, workdir, standalone=True, max_pods=args.max_pods)
    agent.start()
    out = Density()
    manifests = workdir / "manifests"
    try:
        pid = agent.proc.pid
        cpu_before = cpu_seconds(pid)
        print(f"  {kind} standalone: writing {args.pods} static pods", flush=True)
        start_wall, start = time.time(), time.perf_counter()
        for i in range(args.pods):
            tmp = manifests / f".s-{i}.yaml"
            tmp.write_text(yaml.safe_dump(static_pod(f"s-{i}")))
            tmp.rename(manifests / f"s-{i}.yaml")

        async def running() -> list:
            agent.check_alive()
            ours = [c for c in await cri.list_containers()
                    if c.labels.get("io.kubernetes.pod.name", "").startswith("s-")
                    and c.state == api.CONTAINER_RUNNING]
            return ours if len(ours) >= args.pods else []
        containers = await wait_for(running, 600, f"{args.pods} static pods running", interval=0.2)
        out.all_running_s = time.perf_counter() - start
        started = [(await cri.container_status(c.id)).status.started_at / 1e9 for c in containers]
        out.per_pod_s = [t - start_wall for t in started]
        out.ramp_cpu_s = cpu_seconds(pid) - cpu_before
        out.ramp_peak_rss_mib = memory_kib(pid, "VmHWM") / 1024
    finally:
        agent.stop()
        await remove_test_pods(cri)
    return out


def table(title: str, results: dict[str, Density], pods: int, idle: bool) -> None:
    base, ours = results["kubelet"], results["pykubelet"]
    rows = [("RSS Ready with no pods (MiB)", base.no_pods_rss_mib, ours.no_pods_rss_mib)] if idle else []
    rows += [(f"all {pods} Running (s)", base.all_running_s, ours.all_running_s),
            ("per pod p50 (s)", statistics.median(base.per_pod_s), statistics.median(ours.per_pod_s)),
            ("per pod p99 (s)", percentile(base.per_pod_s, 0.99), percentile(ours.per_pod_s, 0.99)),
            ("agent CPU during the ramp (s)", base.ramp_cpu_s, ours.ramp_cpu_s),
            ("agent peak RSS (MiB)", base.ramp_peak_rss_mib, ours.ramp_peak_rss_mib)]
    if idle:
        rows += [(f"{RAMP_ROWS.get(name, name)} CPU during the ramp (s)", base.others_ramp_cpu_s[name],
                  ours.others_ramp_cpu_s[name]) for name in base.others_ramp_cpu_s]
        rows += [(f"idle CPU at {pods} pods (% of a core)", base.idle_cpu_percent, ours.idle_cpu_percent),
                 (f"RSS at {pods} pods (MiB)", base.idle_rss_mib, ours.idle_rss_mib),
                 (f"  of which anonymous (MiB)", base.idle_anon_mib, ours.idle_anon_mib),
                 (f"threads at {pods} pods", base.idle_threads, ours.idle_threads),
                 ("delete -> all gone (s)", base.all_gone_s, ours.all_gone_s)]
    print(f"\n{title}; {machine()}, Kubernetes v1.36.3")
    print(f"{'':38} {'kubelet':>10} {'pykubelet':>10} {'ratio':>8}")
    for label, b, o in rows:
        print(f"{label:38} {b:10.2f} {o:10.2f} {o / b if b else float('nan'):7.2f}x")


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, default=110)
    parser.add_argument("--max-pods", type=int, default=None, help="maxPods of both agents (default: 110)")
    parser.add_argument("--idle", type=float, default=60.0)
    parser.add_argument("--skip-standalone", action="store_true")
    parser.add_argument("--runs", type=int, default=1, help="rounds of the cluster part, alternating the order")
    parser.add_argument("--probe", action="store_true", help="pykubelet's memory from inside (agent_probe.py)")
    parser.add_argument("--trace", action="store_true", help="with --probe: tracemalloc in the agent")
    args = parser.parse_args()
    network_dir = tempfile.mkdtemp(prefix="pykubelet-bench-ipam-")
    assets.write_conflist(CNI_CONF_DIR, assets.render("pod-network.conflist", bridge="pkl0",
                                                      pod_cidr=STANDALONE_POD_CIDR, ipam_dir=network_dir))
    kube = await KubeClient.from_kubeconfig(str(ADMIN), qps=1000, burst=1000)
    rounds: list[tuple[tuple[str, str], dict[str, Density]]] = []
    standalone: dict[str, Density] = {}
    async with CRIClient(ENDPOINT) as cri:
        await remove_test_pods(cri)
        for round_ in range(args.runs):
            order = ("kubelet", "pykubelet") if round_ % 2 == 0 else ("pykubelet", "kubelet")
            cluster: dict[str, Density] = {}
            rounds.append((order, cluster))
            for kind in order:
                print(f"round {round_ + 1} of {args.runs}: {kind}", flush=True)
                workdir = pathlib.Path(tempfile.mkdtemp(prefix=f"pykubelet-density-{kind}-"))
                try:
                    cluster[kind] = await cluster_density(kind, kube, cri, args, workdir, round_ + 1)
                    if round_ == 0 and not args.skip_standalone:
                        standalone_dir = workdir / "standalone"
                        standalone_dir.mkdir()
                        standalone[kind] = await standalone_density(kind, cri, args, standalone_dir)
                finally:
                    shutil.rmtree(workdir, ignore_errors=True)
    await kube.close()
    shutil.rmtree(network_dir, ignore_errors=True)
    for round_, (order, cluster) in enumerate(rounds, 1):
        table(f"Density: {args.pods} pods through the API at once (round {round_}, {order[0]} first)",
              cluster, args.pods, idle=True)
        if cluster["pykubelet"].probes:
            show_probes(cluster["pykubelet"].probes, args.pods)
    if standalone:
        table(f"Density: {args.pods} static pods at once (standalone)", standalone, args.pods, idle=False)
    if len(rounds) > 1:
        print(f"\nall {args.pods} Running, pykubelet / kubelet, per round: " + ", ".join(
            f"{c['pykubelet'].all_running_s / c['kubelet'].all_running_s:.2f}x ({o[0]} first)" for o, c in rounds))
    return 0


if __name__ == "__main__":
    with control_plane():
        sys.exit(asyncio.run(main()))
