"""`kubeadm join` with pykubelet vs with the real kubelet, same control plane, same run.

    python -m tests.bench.kubeadm [--joins 5]

One control plane (`kubeadm init`, pykubelet running it as static pods, tests/kubeadm/node.py's
machine-in-a-namespace), then `--joins` worker joins for each kubelet, alternating: a fresh node
(netns, mount namespace, its own containerd with the images already imported), `kubeadm join`
with a bootstrap token, the Node seen Ready by a watch on the apiserver, then `kubeadm reset`
and the node removed. Measured per join:
- join → Ready: `kubeadm join` started (preflight) until the Node is first seen Ready;
- bootstrap → Ready: the init system started the kubelet with the bootstrap kubeconfig (kubeadm's
  kubelet-start) until Ready: TLS bootstrap, registration, the first Ready status;
- kubeadm join: the command's own duration (it returns once kubelet.conf works).

The real kubelet (v1.36.3, built by the test bed) gets what it needs on this machine and no more:
a CNI config in its node's /etc/cni/net.d (it runs no pod network of its own; pykubelet writes
its own once it has a podCIDR), and a kubeadm patch with cgroupRoot /kubelet-bench (its orphaned
pod cgroup cleanup would otherwise kill the pods of the other nodes' agents on this machine).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import tempfile
import threading
import time
from pathlib import Path

from pyroute2.netns import setns

from pykubelet.kube.client import KubeClient
from tests.bench.startup import machine
from tests.kubeadm.conftest import (ControlPlane, join_config, kubeadm, kubeadm_init, remove, reset)
from tests.kubeadm.node import K8S_BIN, LABEL_ARG, PYKUBELET, KubeadmNode, lan_down
from tests.helpers import run_to_completion, wait_for

REAL_KUBELET = f"#!/bin/sh\nexec {K8S_BIN / 'kubelet'} \"$@\"\n"
BENCH_CGROUP_ROOT = "/kubelet-bench"
CGROUP_HIERARCHIES = Path("/sys/fs/cgroup")


class ReadyWatcher:
    """When each Node is first seen Ready: a watch from a thread inside the control plane's netns."""

    def __init__(self, control_plane: ControlPlane, kubeconfig: Path):
        self.netns = f"/var/run/netns/{control_plane.node.name}"
        self.kubeconfig = kubeconfig
        self.ready_at: dict[str, float] = {}
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        setns(self.netns)  # this thread only; its sockets stay in the namespace
        asyncio.run(self._watch())

    async def _watch(self) -> None:
        kube = await KubeClient.from_kubeconfig(str(self.kubeconfig))
        while True:
            try:
                async for event in kube.watch("/api/v1/nodes", {}, 300):
                    node = event.get("object") or {}
                    name = node.get("metadata", {}).get("name")
                    ready = any(c["type"] == "Ready" and c["status"] == "True"
                                for c in node.get("status", {}).get("conditions") or [])
                    if event.get("type") == "DELETED":
                        self.ready_at.pop(name, None)
                    elif ready and name:
                        self.ready_at.setdefault(name, time.time())
            except Exception:  # noqa: BLE001  the bench keeps watching through apiserver hiccups
                await asyncio.sleep(0.2)


def bridge_conflist(subnet: str) -> str:
    return json.dumps({"cniVersion": "1.0.0", "name": "bench", "plugins": [
        {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": True,
         "ipam": {"type": "host-local", "ranges": [[{"subnet": subnet}]], "routes": [{"dst": "0.0.0.0/0"}]}},
        {"type": "portmap", "capabilities": {"portMappings": True}}]})


def first_kubelet_start(node: KubeadmNode) -> float:
    match = re.search(r"--- start 1 at ([0-9.]+):", node.kubelet_log())
    assert match, node.kubelet_log()[:2000]
    return float(match.group(1))


def make_bench_cgroups(cgroup_root: str = BENCH_CGROUP_ROOT) -> None:
    """The kubelet wants its cgroupRoot to exist (kind's unit makes /kubelet before it starts)."""
    for hierarchy in CGROUP_HIERARCHIES.iterdir():
        if hierarchy.is_dir() and not hierarchy.is_symlink() and (hierarchy / "cgroup.procs").exists():
            (hierarchy / cgroup_root.lstrip("/")).mkdir(exist_ok=True)


def remove_bench_cgroups(cgroup_root: str = BENCH_CGROUP_ROOT) -> None:
    for hierarchy in CGROUP_HIERARCHIES.iterdir():
        root = hierarchy / cgroup_root.lstrip("/")
        if root.is_dir() and not hierarchy.is_symlink():
            for path in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                path.rmdir()
            root.rmdir()


def join_once(kind: str, index: int, plane: ControlPlane, watcher: ReadyWatcher) -> dict[str, float]:
    node = KubeadmNode(f"pkl-kb-{kind[0]}{index}", 20 + index, kubelet=REAL_KUBELET if kind == "kubelet" else PYKUBELET,
                       extra_args=LABEL_ARG)
    try:
        node.up()
        extra = {}
        if kind == "kubelet":
            make_bench_cgroups()
            node.sh("sh", "-c", f"mkdir -p /etc/cni/net.d /etc/kubeadm-patches && echo '{bridge_conflist(f'10.246.{index}.0/24')}'"
                                f" > /etc/cni/net.d/10-bench.conflist && echo 'cgroupRoot: {BENCH_CGROUP_ROOT}' >"
                                " /etc/kubeadm-patches/kubeletconfiguration+merge.yaml")
            extra = {"patches": {"directory": "/etc/kubeadm-patches"}}
        config = join_config(node, plane.node, plane.token, plane.ca_hash, **extra)
        began = time.time()
        kubeadm(node, "join", config=config)
        joined = time.time()
        ready = run_to_completion(wait_for(lambda: watcher.ready_at.get(node.name), 180, f"{node.name} Ready",
                                           describe=lambda: plane.describe(node)))
        return {"join → Ready": ready - began, "bootstrap → Ready": ready - first_kubelet_start(node),
                "kubeadm join": joined - began}
    finally:
        reset(node)
        plane.node.kubectl("delete", "node", node.name, "--wait=false", check=False)
        remove(node)
        if kind == "kubelet":
            remove_bench_cgroups()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--joins", type=int, default=5)
    joins = parser.parse_args().joins
    cp = KubeadmNode("pkl-kb-cp", 1, extra_args=LABEL_ARG)  # agent network mode: pykubelet's own pod network
    results: dict[str, list[dict[str, float]]] = {"kubelet": [], "pykubelet": []}
    try:
        cp.up()
        t0 = time.time()
        plane = kubeadm_init(cp, addons=False)
        init_seconds = time.time() - t0
        with tempfile.TemporaryDirectory(prefix="pkl-bench-kubeadm-") as tmp:
            admin = Path(tmp) / "admin.conf"
            admin.write_bytes(cp.read("/etc/kubernetes/admin.conf"))
            watcher = ReadyWatcher(plane, admin)
            watcher.start()
            for i in range(joins):
                for kind in ("kubelet", "pykubelet"):
                    result = join_once(kind, i, plane, watcher)
                    print(f"{kind} join {i + 1}: " + ", ".join(f"{k} {v:.2f}s" for k, v in result.items()), flush=True)
                    results[kind].append(result)
    finally:
        if cp.holder is not None:
            reset(cp)
        remove(cp)
        lan_down()
    print(f"\n{machine()}\nkubeadm init with pykubelet running the control plane: {init_seconds:.1f}s\n")
    print(f"{joins} joins each, alternating; seconds\n")
    print_comparison(results, digits=2)
    return 0


def print_comparison(results: dict[str, list[dict[str, float]]], digits: int) -> None:
    """The table of each metric, kubelet vs pykubelet: median, max and the medians' ratio."""
    print("| s | kubelet p50 | kubelet max | pykubelet p50 | pykubelet max | p50 ratio |")
    print("|---|---:|---:|---:|---:|---:|")
    for metric in results["kubelet"][0]:
        k = [r[metric] for r in results["kubelet"]]
        p = [r[metric] for r in results["pykubelet"]]
        print(f"| {metric} | {statistics.median(k):.{digits}f} | {max(k):.{digits}f} | "
              f"{statistics.median(p):.{digits}f} | {max(p):.{digits}f} | "
              f"{statistics.median(p) / statistics.median(k):.2f}× |")


if __name__ == "__main__":
    raise SystemExit(main())
