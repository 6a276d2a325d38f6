"""Where pykubelet's memory goes: the modules a node with a kubeconfig imports, and each pod on
the pod path, in-process on the unit tests' fakes (no containerd, no apiserver).

    python -m tests.bench.memory [--pods 110,250] [--top 25]

1. imports: RSS (/proc/self/smaps_rollup) after importing what an agent with a kubeconfig
   imports, and tracemalloc's bytes per package, each module's own (its code objects, classes and
   data; the modules it imports counted to them).
2. pods: the pod path as the agent builds it (tests/unit/core/harness.py; with --grpc its real CRI
   client, the fake runtime served over gRPC by a process of its own), fed by the apiserver
   source as a watch would feed it, with apiserver-shaped pods (the density bench's pod with
   managedFields, defaults, tolerations, a status); RSS and traced bytes with no pods, with each
   count of pods Running, and after they are all deleted; the growth per pod by file and by line,
   and the objects per type (gc) the pods added. The fakes' own memory is left out of the traces.

RSS here includes tracemalloc's own overhead where tracing is on; compare numbers of one run.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import copy
import gc
import os
import pathlib
import signal
import sys
import tempfile
import threading
import tracemalloc
from typing import Any

from tests.bench.agent_probe import LIBC, arenas
from tests.bench.memory_imports import imports, rss_mib

SERVERS: list[int] = []  # the fake CRI servers started (--grpc)
FAKES = ("*/tests/fakes/*", "*/tests/bench/memory.py", "*/tracemalloc.py")


def malloc_mib() -> str:
    """glibc's heap: bytes in use, bytes free but held (fragmentation), bytes mmapped (big blocks)."""
    info = LIBC.mallinfo2()
    return (f"malloc in use {info.uordblks / 2**20:.1f}, free held {info.fordblks / 2**20:.1f}, "
            f"mmapped {info.hblkhd / 2**20:.1f} MiB in {len(arenas())} arenas; {threading.active_count()} threads")


def api_pod(i: int, namespace: str = "t-density") -> dict[str, Any]:
    """A pod as the apiserver sends it once scheduled: the density bench's pod with what admission
    and the apiserver add (defaults, tolerations, managedFields); no service-account volume, as there."""
    name, uid = f"d-{i}", f"0b6f1e5c-0000-4000-8000-{i:012d}"
    return {
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {
            "name": name, "namespace": namespace, "uid": uid, "resourceVersion": str(1000 + i),
            "creationTimestamp": "2026-12-07T02:00:00Z",
            "managedFields": [{"manager": "python", "operation": "Update", "apiVersion": "v1",
                               "time": "2026-12-07T02:00:00Z", "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:spec": {"f:containers": {'k:{"name":"main"}': {
                                   ".": {}, "f:command": {}, "f:image": {}, "f:imagePullPolicy": {},
                                   "f:name": {}, "f:resources": {}, "f:terminationMessagePath": {},
                                   "f:terminationMessagePolicy": {}}},
                                   "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:nodeSelector": {},
                                   "f:restartPolicy": {}, "f:schedulerName": {}, "f:securityContext": {},
                                   "f:terminationGracePeriodSeconds": {}}}}],
        },
        "spec": {
            "containers": [{"name": "main", "image": "busybox:1.36", "command": ["sh", "-c", "sleep 3600"],
                            "resources": {}, "imagePullPolicy": "IfNotPresent",
                            "terminationMessagePath": "/dev/termination-log",
                            "terminationMessagePolicy": "File"}],
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 1, "dnsPolicy": "ClusterFirst",
            "nodeSelector": {"kubernetes.io/hostname": "node1"}, "serviceAccountName": "default",
            "serviceAccount": "default", "automountServiceAccountToken": False, "nodeName": "node1", "securityContext": {},
            "schedulerName": "default-scheduler", "priority": 0, "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                             "tolerationSeconds": 300},
                            {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                             "effect": "NoExecute", "tolerationSeconds": 300}],
        },
        "status": {"phase": "Pending", "qosClass": "BestEffort",
                   "conditions": [{"type": "PodScheduled", "status": "True",
                                   "lastTransitionTime": "2026-12-07T02:00:00Z"}]},
    }


def top_growth(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, key: str, pods: int, top: int) -> None:
    print(f"{'KiB/pod':>8} {'count':>7}  by {key}")
    for stat in after.compare_to(before, key)[:top]:
        if stat.size_diff <= 0:
            break
        frame = stat.traceback[0]
        where = f"{frame.filename.split('/pykubelet/')[-1].split('site-packages/')[-1]}:{frame.lineno}" \
            if key == "lineno" else frame.filename.split("/pykubelet/")[-1].split("site-packages/")[-1]
        print(f"{stat.size_diff / 1024 / pods:8.2f} {stat.count_diff:7d}  {where}")


def object_counts() -> collections.Counter[str]:
    return collections.Counter(type(o).__qualname__ for o in gc.get_objects())


async def pods_on_the_path(counts: list[int], top: int, trace: bool, grpc: bool) -> None:
    from pykubelet.cri.client import CRIClient
    from pykubelet.cri.v1 import api_pb2 as api
    from pykubelet.sources.apiserver import ApiserverPodSource
    from tests.fakes.kube import FakeKube
    from tests.fakes.runtime import FakeRuntime
    from tests.unit.core.harness import Core, clock, until

    class QuietKube(FakeKube):
        """The status writes succeed and are not kept (the fake's record is not the agent's memory)."""

        async def patch(self, path: str, body: dict[str, Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
            return {"metadata": {"resourceVersion": "1"}, "status": body.get("status", {})}

    with tempfile.TemporaryDirectory(prefix="pykubelet-memory-") as tmp:
        server = None
        if grpc:  # the agent's CRI client, the fake runtime behind it in a process of its own
            socket = os.path.join(tmp, "cri.sock")
            server = await asyncio.create_subprocess_exec(sys.executable, "-m", "tests.bench.fake_cri_server", socket,
                                                          stdout=asyncio.subprocess.PIPE)
            SERVERS.append(server.pid)  # ended by main(), however this ends
            await server.stdout.readline()  # "serving"
            runtime = CRIClient(f"unix://{socket}")
        else:
            runtime = FakeRuntime(clock)
        core = Core(runtime, pathlib.Path(tmp), kube=QuietKube())
        core.dispatcher.allocatable = type(core.dispatcher.allocatable)(pods=max(counts), cpu_millis=64000,
                                                                        memory_bytes=256 << 30)
        source = ApiserverPodSource(QuietKube(), "node1", core.dispatcher.set_pods)
        core.start()
        watched: dict[str, dict[str, Any]] = {}

        def publish() -> None:  # what the reflector does with each watch event: the whole set
            source._reflector.objects = watched
            source._publish(watched)

        async def settle() -> None:
            await asyncio.sleep(3)  # a few relists, the status writes done
            gc.collect()

        def running(n: int) -> bool:
            return sum(1 for uid in watched if core.status(uid).get("phase") == "Running") >= n

        def traces() -> tracemalloc.Snapshot | None:
            if not trace:
                return None
            return tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, f) for f in FAKES])

        def line(what: str, n: int, base: tracemalloc.Snapshot | None) -> str:
            now = rss_mib()
            out = f"{what}: RSS {now['Rss']:.1f} MiB (anonymous {now['Anonymous']:.1f}); {malloc_mib()}"
            if base is not None:
                grown = sum(s.size_diff for s in traces().compare_to(base, "filename"))
                out += f"; traced growth {grown / 2**20:.2f} MiB" + (f" = {grown / 1024 / n:.1f} KiB per pod" if n else "")
            return out

        await settle()
        if trace:
            tracemalloc.start(12)
        base_objects = object_counts()
        base = traces()
        print(f"\n== pods on the pod path (apiserver source, fake runtime), tracing {'on' if trace else 'off'}")
        print(line("no pods", 0, None))
        peak = 0.0
        for n in counts:
            for i in range(len(watched), n):
                raw = api_pod(i)
                watched[raw["metadata"]["uid"]] = raw
                publish()  # one event per pod, as the watch delivers them

            def ramping() -> bool:
                nonlocal peak
                peak = max(peak, rss_mib()["Rss"])
                return running(n)
            await until(ramping, timeout=600, what=f"{n} pods Running")
            await settle()
            print(line(f"{n} pods Running (peak during the ramp {peak:.1f})", n, base))
        n = counts[-1]
        if trace:
            snapshot = traces()
            top_growth(base, snapshot, "filename", n, top)
            top_growth(base, snapshot, "lineno", n, top)
        grown_objects = object_counts() - base_objects
        print(f"{'per pod':>8}  objects by type")
        for name, count in grown_objects.most_common(top):
            print(f"{count / n:8.1f}  {name}")
        for uid, raw in watched.items():  # deleted through the API: deletionTimestamp, then gone
            raw = copy.deepcopy(raw)
            raw["metadata"].update(deletionTimestamp="2026-12-07T02:10:00Z", deletionGracePeriodSeconds=1,
                                   resourceVersion=str(int(raw["metadata"]["resourceVersion"]) + 100000))
            watched[uid] = raw
        publish()

        async def all_stopped() -> bool:
            return not [c for c in await runtime.list_containers() if c.state == api.CONTAINER_RUNNING]
        await until(all_stopped, timeout=60, what="every container stopped")
        watched.clear()
        publish()
        # The node's cgroups here are plain directories, whose files a cgroupfs would take away with
        # each rmdir: taken away first, so the pods' cgroups go and their records end as on a node.
        for dirpath, _, files in os.walk(pathlib.Path(tmp) / "cgroup"):
            for name in files:
                os.unlink(os.path.join(dirpath, name))

        def forgotten() -> bool:  # the agent's housekeeping drops the records of pods gone everywhere
            core.dispatcher.housekeeping(core.cache.uids(), core.cache.listed or 0)
            return len(core.dispatcher.records) == 0
        await until(forgotten, timeout=120, what="every pod forgotten")
        await settle()
        print(line(f"all deleted ({len(core.dispatcher.records)} records left)", 0, base))
        if trace:
            top_growth(base, traces(), "lineno", 1, 10)
        await core.stop()
        tracemalloc.stop()
        if server is not None:
            await runtime.close()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", default="110,250", help="counts of pods to measure at, ascending")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--skip-imports", action="store_true")
    parser.add_argument("--grpc", action="store_true",
                        help="the agent's CRI client over gRPC, the fake runtime served by tests/bench/fake_cri_server.py")
    parser.add_argument("--trace", action="store_true", help="where the pods' bytes go (tracemalloc; slower, RSS inflated)")
    args = parser.parse_args()
    if not args.skip_imports:
        imports(args.top)
    try:
        asyncio.run(pods_on_the_path([int(n) for n in args.pods.split(",")], args.top, args.trace, args.grpc))
    finally:
        for pid in SERVERS:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
    return 0


if __name__ == "__main__":
    sys.exit(main())
