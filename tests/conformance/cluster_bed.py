"""The cluster `make conformance-cluster` runs the [Conformance] suite on: a control-plane node
and two workers, built the way users build one, with the kubeadm tier's machinery.

Each node is a machine-in-a-namespace (tests/kubeadm/node.py: its own network namespace on a LAN,
its own /etc, /var/lib, /opt and containerd). The cluster is kubeadm's: `kubeadm init` with its
CoreDNS, flannel's DaemonSet as the CNI, `kubeadm join` of the workers, their kubelet-serving
certificates approved (serverTLSBootstrap, as the kubeadm tier sets it), and the proxy:
- pykubelet: every kubelet is pykubelet, and kubeadm's kube-proxy DaemonSet is swapped for the
  pykubelet-proxy DaemonSet (`make addons`' manifest, on kubeadm's kube-proxy ConfigMap);
- kubelet: every kubelet is the real kubelet v1.36.3 and the proxy kubeadm's kube-proxy.
Each node type's cluster has a site of its own on the machine (LAN namespace, bridge, subnet,
node names, state root, work dir, lock), not the kubeadm tier's either: the two clusters and the
tier's tests can run at the same time, so the same day's comparison can be one window's.

The suite reaches the cluster from inside the control-plane node's network namespace, where the
apiserver, the nodes' addresses and (through flannel) the pods' are all routed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tests import progress
from tests.bench.kubeadm import REAL_KUBELET
from tests.conformance import suite
from tests.conformance import bed
from tests.conformance.owned import make_cgroup_root, remove_cgroup_root
from tests.helpers import run_to_completion, wait_for
from tests.kubeadm.conftest import (ADDONS, ControlPlane, approve_serving_certificate, daemon_set_ready,
                                    deployment_available, images_for, join_config, kubeadm, kubeadm_init,
                                    remove, reset)
from tests.kubeadm.node import (BED, K8S_BIN, LABEL_ARG, PRIVATE_RUN_DIRS, PYKUBELET, STATE_PREFIX, KubeadmNode, Lan,
                                lan_down)



@dataclass(frozen=True)
class Site:
    """Where one node type's cluster lives on the machine; nothing in it is another site's."""

    lan: Lan
    node_names: tuple[str, str, str]  # the control plane, then the workers
    work: Path  # the admin kubeconfig: its path marks the suite's processes
    lock: Path  # one run of this node type at a time on a machine


SITES = {
    "pykubelet": Site(Lan("pkl-clan", "clan0", "10.252.0", Path("/run") / f"{STATE_PREFIX}-conformance"),
                      ("pkl-conf-cp", "pkl-conf-w1", "pkl-conf-w2"), Path("/run/pkl-conformance-cluster"),
                      Path("/tmp/pkl-conformance-cluster.lock")),
    "kubelet": Site(Lan("pkl-clank", "clank0", "10.253.0", Path("/run") / f"{STATE_PREFIX}-conformance-kubelet"),
                    ("pkl-confk-cp", "pkl-confk-w1", "pkl-confk-w2"), Path("/run/pkl-conformance-cluster-kubelet"),
                    Path("/tmp/pkl-conformance-cluster-kubelet.lock")),
}
# The real kubelet kills what runs in pod cgroups under its cgroupRoot that it does not know (the
# other clusters' pods included): each node's its own, under one root of the site's. pykubelet
# needs none (the kubeadm tier's nodes share one).
KUBELET_CGROUP_ROOT = "/pkl-conformance-kubelet"
PATCHES = "/etc/kubeadm-patches"  # on the node: kubeadm's patches directory (the real kubelet's cgroupRoot)
PROXY = {"pykubelet": "pykubelet-proxy", "kubelet": "kube-proxy"}  # the proxy DaemonSet in kube-system


def say(msg: str) -> None:
    progress.say("conformance-cluster", msg)


@dataclass
class Cluster:
    kind: str  # "pykubelet" | "kubelet"
    nodes: list[KubeadmNode] = field(default_factory=list)
    plane: ControlPlane | None = None

    def __post_init__(self) -> None:
        if not self.nodes:
            self.nodes = [node_for(self.kind, name, i + 1) for i, name in enumerate(self.site.node_names)]

    @property
    def site(self) -> Site:
        return SITES[self.kind]

    @property
    def control_plane(self) -> KubeadmNode:
        return self.nodes[0]

    @property
    def workers(self) -> list[KubeadmNode]:
        return self.nodes[1:]

    @property
    def admin(self) -> Path:
        return self.site.work / "admin.conf"

    def target(self) -> suite.Target:
        return suite_target(self.control_plane, self.admin)

    def lost_private_dirs(self) -> list[str]:
        """The nodes' own /run dirs (flannel's subnet.env) that are no longer theirs: a tier that
        removed the machine's mount point under them makes every node share one."""
        return [f"{node.name}:{path}" for node in self.nodes for path in PRIVATE_RUN_DIRS
                if node.sh("findmnt", "-n", path, check=False).returncode != 0]

    def describe(self) -> str:
        return self.plane.describe(*self.nodes) if self.plane else ""

    # ---------------------------------------------------------------- up
    def up(self) -> None:
        cp = self.control_plane
        for node in self.nodes:
            say(f"node {node.name} ({node.ip}): namespaces, containerd, the e2e test images")
            if self.kind == "kubelet":
                make_kubelet_cgroup_root(node.name)
            node.up()
            if self.kind == "kubelet":
                node.sh("sh", "-c", f"mkdir -p {PATCHES} && echo 'cgroupRoot: {kubelet_cgroup_root(node.name)}'"
                                    f" > {PATCHES}/kubeletconfiguration+merge.yaml")
            import_e2e_images(node)
        say(f"kubeadm init on {cp.name}")
        self.plane = plane = kubeadm_init(cp, patches=PATCHES if self.kind == "kubelet" else "")
        approve_serving_certificate(plane, cp)
        if self.kind == "pykubelet":
            say("kube-proxy's DaemonSet swapped for pykubelet-proxy's")
            cp.kubectl("delete", "daemonset", "-n", "kube-system", "kube-proxy", "--wait=true", "--timeout=90s")
            cp.kubectl("apply", "-f", str(ADDONS / "pykubelet-proxy.yaml"))
        say("flannel")
        cp.kubectl("apply", "-f", str(ADDONS / "kube-flannel.yml"))
        extra = {"patches": {"directory": PATCHES}} if self.kind == "kubelet" else {}
        for node in self.workers:
            say(f"kubeadm join of {node.name}")
            images_for(node)
            kubeadm(node, "join", config=join_config(node, cp, plane.token, plane.ca_hash, **extra))
            approve_serving_certificate(plane, node)
            # the tier's mark of a joined node; a conformance cluster's workers carry no taint
            cp.kubectl("taint", "node", node.name, "pykubelet.test/joined-")
        self._wait_until_ready()
        self.site.work.mkdir(parents=True, exist_ok=True)
        self.admin.write_bytes(cp.read("/etc/kubernetes/admin.conf"))
        say("the cluster is up: " + ", ".join(f"{n.name} {n.ip}" for n in self.nodes))

    def _wait_until_ready(self) -> None:
        plane, count = self.plane, len(self.nodes)
        assert plane is not None
        checks = [(lambda: all(plane.node_ready(n.name) for n in self.nodes), "every node Ready"),
                  (lambda: daemon_set_ready(plane, "kube-flannel", "kube-flannel-ds", count), "flannel on every node"),
                  (lambda: daemon_set_ready(plane, "kube-system", PROXY[self.kind], count),
                   f"{PROXY[self.kind]} on every node"),
                  (lambda: deployment_available(plane, "kube-system", "coredns"), "CoreDNS Ready")]
        for check, what in checks:
            run_to_completion(wait_for(check, 300, what, interval=2, describe=self.describe))

    # ---------------------------------------------------------------- down
    def down(self) -> None:
        """kubeadm reset and removal of every node, then the LAN and the run's files and cgroups;
        safe on a half-made cluster."""
        stop_the_suite(self.site)  # an interrupted run's
        for node in reversed(self.nodes):
            say(f"removing node {node.name}")
            if (node.state / "holder.pid").exists():
                with contextlib.suppress(AssertionError, subprocess.TimeoutExpired):
                    reset(node)
            remove(node)
        lan_down(self.site.lan)
        if self.kind == "kubelet":
            remove_kubelet_cgroup_root()
        shutil.rmtree(self.site.work, ignore_errors=True)


def suite_target(control_plane: KubeadmNode, admin: Path) -> suite.Target:
    """e2e.test from inside the control-plane node's network namespace (the apiserver, the nodes and,
    through flannel, every pod are routed there), as the cluster's admin (kubeadm's admin.conf, at
    `admin` on the machine)."""
    return suite.Target(kubeconfig=admin, prefix=("nsenter", f"--net=/var/run/netns/{control_plane.name}", "--"),
                        extra_args=(f"--kubectl-path={K8S_BIN / 'kubectl'}",))


def node_for(kind: str, name: str, index: int) -> KubeadmNode:
    if kind == "kubelet":
        return KubeadmNode(name, index, kubelet=REAL_KUBELET, extra_args=LABEL_ARG, lan=SITES[kind].lan)
    return KubeadmNode(name, index, kubelet=PYKUBELET, lan=SITES[kind].lan)


def import_e2e_images(node: KubeadmNode) -> None:
    """The e2e test images the bed builds (tests/bed/images_e2e.py), into the node's containerd."""
    socket = node.endpoint.removeprefix("unix://")
    result = subprocess.run([sys.executable, str(BED / "images_e2e.py")], capture_output=True, text=True,
                            timeout=1800, env={**os.environ, "CONTAINERD_ADDRESS": socket})
    if result.returncode != 0:
        raise RuntimeError(f"images_e2e.py into {node.name} failed:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}")


# ---------------------------------------------------------------- the real kubelet's cgroup roots
def kubelet_cgroup_root(node_name: str) -> str:
    return f"{KUBELET_CGROUP_ROOT}/{node_name}"


def make_kubelet_cgroup_root(node_name: str) -> None:
    make_cgroup_root(kubelet_cgroup_root(node_name))


def remove_kubelet_cgroup_root() -> None:
    remove_cgroup_root(KUBELET_CGROUP_ROOT)


# ---------------------------------------------------------------- a killed run's leftovers
def stop_the_suite(site: Site) -> list[int]:
    """ginkgo and e2e.test of this run or a killed one: their command lines name the site's kubeconfig."""
    marker = str(site.work).encode() + b"/"
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            with contextlib.suppress(OSError):
                if marker in Path("/proc", entry, "cmdline").read_bytes():
                    pids.append(int(entry))
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pids


def remove_leftovers(kind: str) -> None:
    """Before a run, under its lock: what a killed run of the same node type left (its suite's
    processes, its nodes, LAN and cgroups). Nothing here is another run's: the names are the site's."""
    site = SITES[kind]
    pids = stop_the_suite(site)
    lan = site.lan
    left = [n for n in site.node_names if (lan.state_root / n).exists() or Path("/var/run/netns", n).exists()]
    if pids or left or lan.state_root.exists() or Path("/var/run/netns", lan.namespace).exists() or site.work.exists():
        say(f"removing what an earlier run left: processes {pids}, nodes {left}")
        Cluster(kind).down()


def exclusive(kind: str) -> contextlib.AbstractContextManager[None]:
    return bed.exclusive(SITES[kind].lock, f"conformance-cluster run ({kind})")
