"""The cluster users build, pykubelet vs the real kubelet on the same bed, same run: how long
flannel takes to make the nodes Ready and kubeadm's CoreDNS to turn Ready.

    python -m tests.bench.addons [--runs 2]

Each run builds a two-node cluster the way tests/kubeadm/ does (a control-plane node and a worker,
each a machine-in-a-namespace with its own containerd; kubeadm init with its CoreDNS and
kube-proxy add-ons, kubeadm join), with every kubelet either pykubelet or the real kubelet
v1.36.3, alternating, and measures:
- `kubectl apply -f kube-flannel.yml` → every node Ready (both nodes joined and NotReady before);
- `kubeadm init` started → CoreDNS's Deployment Ready (its /ready probe passing on the nodes).
Images are imported before the clocks start. Each real kubelet gets a kubeadm patch with a
cgroupRoot of its own node (/kubelet-bench-<node>), as in tests/bench/kubeadm.py (why: there): the
two nodes share this machine's cgroup hierarchy, and with one root each kubelet's orphaned pod
cgroup cleanup kills the other node's pods (the control plane's static pods crash-loop).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from tests.bench.kubeadm import (BENCH_CGROUP_ROOT, REAL_KUBELET, make_bench_cgroups, print_comparison,
                                 remove_bench_cgroups)
from tests.bench.startup import machine
from tests.helpers import run_to_completion, wait_for
from tests.kubeadm.conftest import (ADDONS, ControlPlane, approve_serving_certificate, daemon_set_ready,
                                    deployment_available, images_for, join_config, kubeadm, kubeadm_init,
                                    ready_condition,
                                    remove, reset)
from tests.kubeadm.node import LABEL_ARG, STATE_PREFIX, KubeadmNode, Lan, lan_down

PATCHES = "/etc/kubeadm-patches"
# A LAN of its own: the kubeadm tier's tests can run beside it
LAN = Lan("pkl-blan", "blan0", "10.253.0", Path("/run") / f"{STATE_PREFIX}-bench")
METRICS = ("kubectl apply -f kube-flannel.yml → all nodes Ready", "kubeadm init → CoreDNS Ready")


def node_for(kind: str, name: str, index: int) -> KubeadmNode:
    if kind == "kubelet":
        return KubeadmNode(name, index, kubelet=REAL_KUBELET, extra_args=LABEL_ARG, lan=LAN)
    return KubeadmNode(name, index, lan=LAN)


def cgroup_root(node: KubeadmNode) -> str:
    return f"{BENCH_CGROUP_ROOT}-{node.name}"


def patch_cgroup_root(node: KubeadmNode) -> None:
    make_bench_cgroups(cgroup_root(node))
    node.sh("sh", "-c", f"mkdir -p {PATCHES} && echo 'cgroupRoot: {cgroup_root(node)}' >"
                        f" {PATCHES}/kubeletconfiguration+merge.yaml")


def one_run(kind: str) -> dict[str, float]:
    cp, worker = node_for(kind, "pkl-ab-cp", 1), node_for(kind, "pkl-ab-w1", 2)
    plane: ControlPlane | None = None
    try:
        for node in (cp, worker):
            node.up()
            if kind == "kubelet":
                patch_cgroup_root(node)
        plane = kubeadm_init(cp, patches=PATCHES if kind == "kubelet" else "")
        approve_serving_certificate(plane, cp)
        extra = {"patches": {"directory": PATCHES}} if kind == "kubelet" else {}
        images_for(worker)
        kubeadm(worker, "join", config=join_config(worker, cp, plane.token, plane.ca_hash, **extra))
        approve_serving_certificate(plane, worker)
        for node in (cp, worker):
            run_to_completion(wait_for(lambda: ready_condition(plane, node.name).get("status") == "False", 120,
                                       f"{node.name} registered and NotReady", interval=0.5,
                                       describe=lambda: plane.describe(cp, worker)))
        run_to_completion(wait_for(lambda: daemon_set_ready(plane, "kube-system", "kube-proxy", 2), 180,
                                   "kube-proxy running on both nodes", interval=0.5, describe=plane.describe))
        applied = time.monotonic()
        cp.kubectl("apply", "-f", str(ADDONS / "kube-flannel.yml"))
        run_to_completion(wait_for(lambda: all(plane.node_ready(n.name) for n in (cp, worker)), 180,
                                   "every node Ready", interval=0.2, describe=lambda: plane.describe(cp, worker)))
        flannel_seconds = time.monotonic() - applied
        run_to_completion(wait_for(lambda: deployment_available(plane, "kube-system", "coredns"), 300,
                                   "CoreDNS Ready", interval=0.2, describe=lambda: plane.describe(cp, worker)))
        return {METRICS[0]: flannel_seconds, METRICS[1]: time.monotonic() - plane.init_started}
    finally:
        for node in (worker, cp):
            if node.holder is not None:
                reset(node)
            remove(node)
        lan_down(LAN)
        if kind == "kubelet":
            for node in (cp, worker):
                remove_bench_cgroups(cgroup_root(node))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=2)
    runs = parser.parse_args().runs
    results: dict[str, list[dict[str, float]]] = {"kubelet": [], "pykubelet": []}
    for i in range(runs):
        for kind in ("kubelet", "pykubelet") if i % 2 == 0 else ("pykubelet", "kubelet"):
            result = one_run(kind)
            print(f"{kind} run {i + 1}: " + ", ".join(f"{k} {v:.1f}s" for k, v in result.items()), flush=True)
            results[kind].append(result)
    print(f"\n{machine()}\n{runs} runs each, alternating; seconds\n")
    print_comparison(results, digits=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
