"""The kubeadm tier: the cluster users build. `kubeadm init` with pykubelet running the control
plane as static pods and kubeadm's add-ons (CoreDNS, kube-proxy), flannel's DaemonSet as the CNI
(`kubectl apply -f kube-flannel.yml`), then `kubeadm join` of a second pykubelet node with a
bootstrap token; each node a machine of its own inside this one (tests/kubeadm/node.py), so the
tier shares nothing with the cluster tier. The add-on images are `make addons`' (built from their
Go modules under their upstream names). The cluster is the package's: tests/kubeadm/test_addons.py
uses it first, test_kubeadm.py ends with `kubeadm reset`.

What this machine cannot give kubeadm, and is ignored by name: SystemVerification (cgroup v1,
which kubeadm refuses for a kubelet of v1.35 and later).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.helpers import run_to_completion, wait_for
from tests.kubeadm.node import BED, REPO, KubeadmNode, ca_cert_hash, lan_down

K8S_VERSION = "v1.36.3"
POD_SUBNET = "10.244.0.0/16"  # kube-flannel.yml's network, as flannel's guide tells kubeadm users to pick
AGENT_POD_SUBNET = "10.245.0.0/16"  # a cluster pykubelet networks itself (the kubeadm benchmark's)
IGNORED_PREFLIGHT = ["SystemVerification"]
SKIPPED_ADDONS = ["addon/coredns", "addon/kube-proxy"]
CLUSTER_NAME = "pykubelet-kubeadm"
ADDONS = REPO / "build" / "addons"  # make addons' manifests
CNI_NOT_READY = ("container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady "
                 "message:Network plugin returns error: cni plugin not initialized")


def new_token() -> str:
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    pick = lambda n: "".join(secrets.choice(alphabet) for _ in range(n))  # noqa: E731
    return f"{pick(6)}.{pick(16)}"


def node_registration(node: KubeadmNode, **extra: Any) -> dict[str, Any]:
    return {"name": node.name, "criSocket": "unix:///run/containerd/containerd.sock",
            "imagePullPolicy": "IfNotPresent", "ignorePreflightErrors": IGNORED_PREFLIGHT,
            "kubeletExtraArgs": [{"name": "node-ip", "value": node.ip},
                                 {"name": "node-labels", "value": "pykubelet.test/from=kubeadm"}], **extra}


def init_config(node: KubeadmNode, token: str, addons: bool = True, patches: str = "") -> str:
    """kubeadm's config for the init node. Without `addons`: no CoreDNS, no kube-proxy, and a pod
    network pykubelet runs itself (the kubeadm benchmark's cluster)."""
    init: dict[str, Any] = {"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "InitConfiguration",
                            "bootstrapTokens": [{"token": token, "ttl": "2h"}],
                            "localAPIEndpoint": {"advertiseAddress": node.ip, "bindPort": 6443},
                            "nodeRegistration": node_registration(node)}
    if patches:
        init["patches"] = {"directory": patches}
    cluster: dict[str, Any] = {"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "ClusterConfiguration",
                               "kubernetesVersion": K8S_VERSION, "clusterName": CLUSTER_NAME,
                               "controlPlaneEndpoint": f"{node.ip}:6443",
                               "networking": {"podSubnet": POD_SUBNET if addons else AGENT_POD_SUBNET}}
    if not addons:
        init["skipPhases"] = SKIPPED_ADDONS
        cluster.update(dns={"disabled": True}, proxy={"disabled": True})
    # What every node's kubelet gets (kubeadm uploads it as the kubelet-config ConfigMap). cgroupfs:
    # the test bed's containerd runs without systemd. failCgroupV1 false: the real kubelet
    # (benchmark) refuses cgroup v1 otherwise; pykubelet runs on it either way. serverTLSBootstrap:
    # kubelet API certificates from the cluster's CA, which metrics-server verifies.
    kubelet = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
               "cgroupDriver": "cgroupfs", "failCgroupV1": False, "serverTLSBootstrap": addons}
    docs = [init, cluster, kubelet]
    if addons:
        # kube-proxy leaves nf_conntrack_max as it is (a node's network namespace cannot write it),
        # as kind configures it for the same reason
        docs.append({"apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
                     "conntrack": {"maxPerCore": 0}})
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
        self.not_ready_before_cni: dict[str, str] = {}
        """The Ready condition's message of the init node before flannel was applied."""
        self.init_started = time.monotonic()
        """When `kubeadm init` started (monotonic clock; its images were in place before)."""
        self.seconds: dict[str, float] = {}
        """What the bring-up measured: flannel applied → node Ready, kubeadm init → CoreDNS Ready."""

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


def images_for(node: KubeadmNode, addons: bool = True) -> None:
    """The control-plane images kubeadm asks for and `make addons`' images (built once, no-ops
    after), imported into the node's containerd."""
    socket = node.endpoint.removeprefix("unix://")
    commands = [[sys.executable, str(BED / "images_control_plane.py"), "--address", socket]]
    if addons:
        commands.append(["bash", str(BED / "build-addons.sh")])
    for command in commands:
        result = subprocess.run(command, capture_output=True, text=True, timeout=1800,
                                env={**os.environ, "CONTAINERD_ADDRESS": socket})
        assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"


def kubeadm_init(node: KubeadmNode, addons: bool = True, patches: str = "") -> ControlPlane:
    """`patches`: a kubeadm patches directory on the node (the benchmark's real kubelet has one)."""
    images_for(node, addons)
    token = new_token()
    config = init_config(node, token, addons, patches)
    started = time.monotonic()
    kubeadm(node, "init", config=config)
    if not addons:
        # docs/kubeadm.md, step 5: pykubelet routes to every node's pods, so nodes may list Nodes
        node.kubectl("apply", "-f", str(REPO / "cni" / "node-network-rbac.yaml"))
    plane = ControlPlane(node, token)
    plane.init_started = started
    return plane


def kubeadm_join(node: KubeadmNode, control_plane: ControlPlane) -> None:
    images_for(node)
    kubeadm(node, "join", config=join_config(node, control_plane.node, control_plane.token, control_plane.ca_hash))


SERVING_CERTIFICATE = "/var/lib/kubelet/pki/kubelet-server-current.pem"


def approve_serving_certificate(plane: ControlPlane, node: KubeadmNode) -> None:
    """What an admin does on a cluster with serverTLSBootstrap: approve the node's kubelet-serving
    CSRs (kube-controller-manager approves client certificates only; a kubelet restarted by
    kubeadm before the first was approved has filed another), until the kubelet serves with one."""
    def approved_and_in_place() -> bool:
        listed = plane.node.kubectl("get", "csr", "-o", "json", check=False)
        # an apiserver that restarts under load (its liveness probe) is asked again next round
        pending = [c["metadata"]["name"] for c in json.loads(listed.stdout or "{}").get("items", [])
                   if c["spec"]["signerName"] == "kubernetes.io/kubelet-serving"
                   and c["spec"]["username"] == f"system:node:{node.name}"
                   and not c.get("status", {}).get("conditions")] if listed.returncode == 0 else []
        if pending:
            plane.node.kubectl("certificate", "approve", *pending, check=False)
        return node.exists(SERVING_CERTIFICATE)
    run_to_completion(wait_for(approved_and_in_place, 180, f"the kubelet-serving certificate of {node.name}",
                               interval=1, describe=lambda: plane.describe(node)))


def ready_condition(plane: ControlPlane, name: str) -> dict[str, str]:
    """The node's Ready condition; {} while the Node is not there (or the apiserver does not answer)."""
    result = plane.node.kubectl("get", "node", name, "-o", "json", check=False)
    conditions = json.loads(result.stdout)["status"].get("conditions") or [] if result.returncode == 0 else []
    return next((c for c in conditions if c["type"] == "Ready"), {})


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


def bring_up(node: KubeadmNode) -> ControlPlane:
    """kubeadm init with its add-ons, as a user does it: the node stays NotReady (no CNI yet) with
    kube-proxy running on it; `kubectl apply -f kube-flannel.yml`; the node turns Ready."""
    plane = kubeadm_init(node)
    approve_serving_certificate(plane, node)

    def waiting_for_the_cni() -> str:
        condition = ready_condition(plane, node.name)
        return condition.get("message", "") if condition.get("status") == "False" else ""
    plane.not_ready_before_cni[node.name] = run_to_completion(wait_for(
        waiting_for_the_cni, 60, f"node {node.name} NotReady for want of a CNI", describe=plane.describe))
    run_to_completion(wait_for(lambda: daemon_set_ready(plane, "kube-system", "kube-proxy", 1), 120,
                               "kube-proxy running on the NotReady node", interval=1, describe=plane.describe))
    applied = time.monotonic()
    node.kubectl("apply", "-f", str(ADDONS / "kube-flannel.yml"))
    run_to_completion(wait_for(lambda: plane.node_ready(node.name), 120, f"node {node.name} Ready with flannel",
                               interval=0.5, describe=plane.describe))
    plane.seconds["flannel applied → node Ready"] = time.monotonic() - applied
    run_to_completion(wait_for(lambda: deployment_available(plane, "kube-system", "coredns"), 180,
                               "CoreDNS Ready", interval=1, describe=plane.describe))
    plane.seconds["kubeadm init → CoreDNS Ready"] = time.monotonic() - plane.init_started
    return plane


def daemon_set_ready(plane: ControlPlane, namespace: str, name: str, nodes: int) -> bool:
    result = plane.node.kubectl("get", "daemonset", "-n", namespace, name, "-o", "json", check=False)
    status = json.loads(result.stdout).get("status", {}) if result.returncode == 0 else {}
    return status.get("numberReady", 0) >= nodes and status.get("updatedNumberScheduled", 0) >= nodes


def deployment_available(plane: ControlPlane, namespace: str, name: str) -> bool:
    result = plane.node.kubectl("get", "deployment", "-n", namespace, name, "-o", "json", check=False)
    if result.returncode != 0:
        return False
    deployment = json.loads(result.stdout)
    status = deployment.get("status", {})
    return status.get("readyReplicas", 0) >= deployment["spec"].get("replicas", 1) and \
        status.get("updatedReplicas", 0) >= deployment["spec"].get("replicas", 1)


@pytest.fixture(scope="package")
def control_plane(tmp_path_factory):
    """kubeadm init on node pkl-kadm-cp, with pykubelet as its kubelet, add-ons and flannel; reset
    and removed afterwards."""
    node = KubeadmNode("pkl-kadm-cp", 1)
    try:
        node.up()
        yield bring_up(node)
    finally:
        if node.holder is not None:
            reset(node)
        remove(node)
        lan_down()


@contextlib.contextmanager
def joined_worker(control_plane: ControlPlane, name: str, index: int) -> Iterator[KubeadmNode]:
    """kubeadm join of a node (TLS bootstrap with the init's token), until Ready (flannel's DaemonSet
    brings its network); afterwards `kubeadm reset`, its Node deleted, and the node removed."""
    node = KubeadmNode(name, index)
    try:
        node.up()
        kubeadm_join(node, control_plane)
        approve_serving_certificate(control_plane, node)
        run_to_completion(wait_for(lambda: control_plane.node_ready(node.name), 180, f"node {node.name} Ready",
                                   describe=lambda: control_plane.describe(control_plane.node, node)))
        yield node
    finally:
        if node.holder is not None:
            reset(node)
        remove(node)
        control_plane.node.kubectl("delete", "node", name, "--ignore-not-found", "--wait=false", check=False)


@pytest.fixture(scope="package")
def worker(control_plane):
    """Node pkl-kadm-w1, joined for the package."""
    with joined_worker(control_plane, "pkl-kadm-w1", 2) as node:
        yield node


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

