"""The kubeadm tier: `kubeadm init` with pykubelet running the control plane as static pods, and
`kubeadm join` of a second pykubelet node with a bootstrap token, each node a machine of its own
inside this one (tests/kubeadm/node.py), so the tier shares nothing with the cluster tier.

What this machine cannot give kubeadm, and is ignored by name: SystemVerification (cgroup v1,
which kubeadm refuses for a kubelet of v1.35 and later). What cannot be built here is skipped:
the CoreDNS and kube-proxy addons (no binaries for their images).
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from typing import Any

import pytest
import yaml

from tests.helpers import run_to_completion, wait_for
from tests.kubeadm.node import BED, REPO, KubeadmNode, ca_cert_hash, lan_down

K8S_VERSION = "v1.36.3"
POD_SUBNET = "10.245.0.0/16"
IGNORED_PREFLIGHT = ["SystemVerification"]
SKIPPED_ADDONS = ["addon/coredns", "addon/kube-proxy"]
CLUSTER_NAME = "pykubelet-kubeadm"


def new_token() -> str:
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    pick = lambda n: "".join(secrets.choice(alphabet) for _ in range(n))  # noqa: E731
    return f"{pick(6)}.{pick(16)}"


def node_registration(node: KubeadmNode, **extra: Any) -> dict[str, Any]:
    return {"name": node.name, "criSocket": "unix:///run/containerd/containerd.sock",
            "imagePullPolicy": "IfNotPresent", "ignorePreflightErrors": IGNORED_PREFLIGHT,
            "kubeletExtraArgs": [{"name": "node-ip", "value": node.ip},
                                 {"name": "node-labels", "value": "pykubelet.test/from=kubeadm"}], **extra}


def init_config(node: KubeadmNode, token: str) -> str:
    docs = [
        {"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "InitConfiguration",
         "bootstrapTokens": [{"token": token, "ttl": "2h"}],
         "localAPIEndpoint": {"advertiseAddress": node.ip, "bindPort": 6443},
         "nodeRegistration": node_registration(node),
         "skipPhases": SKIPPED_ADDONS},
        {"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "ClusterConfiguration", "kubernetesVersion": K8S_VERSION,
         "clusterName": CLUSTER_NAME, "controlPlaneEndpoint": f"{node.ip}:6443",
         "networking": {"podSubnet": POD_SUBNET}, "dns": {"disabled": True}, "proxy": {"disabled": True}},
        # What every node's kubelet gets (kubeadm uploads it as the kubelet-config ConfigMap). cgroupfs:
        # the test bed's containerd runs without systemd. failCgroupV1 false: the real kubelet
        # (benchmark) refuses cgroup v1 otherwise; pykubelet runs on it either way.
        {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
         "cgroupDriver": "cgroupfs", "failCgroupV1": False},
    ]
    return yaml.safe_dump_all(docs)


def join_config(node: KubeadmNode, control_plane: KubeadmNode, token: str, ca_hash: str, **extra: Any) -> str:
    return yaml.safe_dump({**extra,
        "apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "JoinConfiguration",
        "discovery": {"bootstrapToken": {"apiServerEndpoint": f"{control_plane.ip}:6443", "token": token,
                                         "caCertHashes": [ca_hash]}},
        "nodeRegistration": node_registration(
            node, taints=[{"key": "pykubelet.test/joined", "value": "yes", "effect": "PreferNoSchedule"}]),
    })


def kubeadm(node: KubeadmNode, *args: str, config: str = "", timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """kubeadm on the node (with a config file written there); its output goes into failures."""
    if config:
        path = node.state / "kubeadm.yaml"
        path.write_text(config)
        args = (*args, "--config", str(path))
    result = node.sh("kubeadm", *args, "--v=1", timeout=timeout, check=False)
    (node.state / f"kubeadm-{args[0]}.log").write_text(result.stdout + result.stderr)
    assert result.returncode == 0, (f"kubeadm {' '.join(args)} failed on {node.name}:\n{result.stdout[-4000:]}\n"
                                    f"{result.stderr[-6000:]}\n--- kubelet ---\n{node.kubelet_log()[-6000:]}")
    return result


class ControlPlane:
    """The init node and what joining needs."""

    def __init__(self, node: KubeadmNode, token: str):
        self.node = node
        self.token = token
        self.ca_hash = ca_cert_hash(node.read("/etc/kubernetes/pki/ca.crt"))

    def kubectl_json(self, *args: str) -> Any:
        return json.loads(self.node.kubectl(*args, "-o", "json").stdout)

    def node_ready(self, name: str) -> bool:
        result = self.node.kubectl("get", "node", name, "-o", "json", check=False)
        if result.returncode != 0:
            return False
        conditions = json.loads(result.stdout)["status"].get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    def describe(self, *nodes: KubeadmNode) -> str:
        out = [self.node.kubectl("get", "nodes,pods", "-A", "-o", "wide", check=False).stdout]
        for node in nodes or (self.node,):
            out.append(f"--- kubelet of {node.name} ---\n{node.kubelet_log()[-5000:]}")
        return "\n".join(out)


def images_for(node: KubeadmNode) -> None:
    """The control-plane images kubeadm asks for, built once and imported into the node's containerd."""
    result = subprocess.run([sys.executable, str(BED / "images_control_plane.py"), "--address",
                             node.endpoint.removeprefix("unix://")], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"building the control-plane images failed:\n{result.stderr[-4000:]}"


def kubeadm_init(node: KubeadmNode) -> ControlPlane:
    images_for(node)
    token = new_token()
    kubeadm(node, "init", config=init_config(node, token))
    # docs/kubeadm.md, step 5: pykubelet routes to every node's pods, so nodes may list Nodes
    node.kubectl("apply", "-f", str(REPO / "cni" / "node-network-rbac.yaml"))
    return ControlPlane(node, token)


def kubeadm_join(node: KubeadmNode, control_plane: ControlPlane) -> None:
    kubeadm(node, "join", config=join_config(node, control_plane.node, control_plane.token, control_plane.ca_hash))


def reset(node: KubeadmNode) -> subprocess.CompletedProcess[str]:
    """kubeadm reset, as an admin runs it. The pods' cgroups the kubelet made outlive it (kubeadm
    removes the containers with the kubelet stopped), so their UIDs are kept for `remove`."""
    node.pod_uids |= set(pod_uids(node))
    return node.sh("kubeadm", "reset", "--force", timeout=300, check=False)


def remove(node: KubeadmNode) -> None:
    """The node goes, and with it the empty pod cgroups that the next kubelet would have removed."""
    from pykubelet.runtime.cgroups import remove_pod_cgroups

    node.down()
    for uid in node.pod_uids:
        remove_pod_cgroups(uid)


@pytest.fixture(scope="module")
def control_plane(tmp_path_factory):
    """kubeadm init on node pkl-kadm-cp, with pykubelet as its kubelet; reset and removed afterwards."""
    node = KubeadmNode("pkl-kadm-cp", 1)
    try:
        node.up()
        plane = kubeadm_init(node)
        run_to_completion(wait_for(lambda: plane.node_ready(node.name), 120, f"node {node.name} Ready",
                                   describe=plane.describe))
        yield plane
    finally:
        if node.holder is not None:
            reset(node)
        remove(node)
        lan_down()


@pytest.fixture(scope="module")
def worker(control_plane):
    """kubeadm join of node pkl-kadm-w1 (TLS bootstrap with the init's token), until Ready."""
    node = KubeadmNode("pkl-kadm-w1", 2)
    try:
        node.up()
        kubeadm_join(node, control_plane)
        run_to_completion(wait_for(lambda: control_plane.node_ready(node.name), 120, f"node {node.name} Ready",
                                   describe=lambda: control_plane.describe(control_plane.node, node)))
        yield node
    finally:
        if node.holder is not None:
            reset(node)
        remove(node)


def read_yaml(node: KubeadmNode, path: str) -> Any:
    return yaml.safe_load(node.read(path))


def pod_uids(node: KubeadmNode) -> list[str]:
    from pykubelet.cri.client import CRIClient

    async def uids() -> list[str]:
        cri = CRIClient(node.endpoint)
        try:
            return [s.metadata.uid for s in await cri.list_pod_sandbox()]
        except Exception:  # noqa: BLE001  a node whose containerd is gone has no pods
            return []
        finally:
            await cri.close()
    return run_to_completion(uids())

