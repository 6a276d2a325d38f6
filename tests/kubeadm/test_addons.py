"""The cluster users build, on pykubelet nodes: kubeadm's add-ons (CoreDNS, kube-proxy), flannel's
DaemonSet as the CNI, metrics-server, and `pykubelet proxy` as a DaemonSet in kube-proxy's place.
Runs first on the package's cluster (tests/kubeadm/conftest.py); test_kubeadm.py follows."""

from __future__ import annotations

import json
import os
import uuid
from typing import Any

import pytest

from tests.helpers import wait_for
from tests.kubeadm.conftest import (ADDONS, CNI_NOT_READY, POD_SUBNET, ControlPlane, daemon_set_ready,
                                    deployment_available)
from tests.kubeadm.node import KubeadmNode

BUSYBOX = "docker.io/library/busybox:1.36"
# busybox httpd answering on 8080 with the name of the pod that serves
SERVE = ("mkdir -p /www && hostname > /www/index.html && exec httpd -f -p 8080 -h /www")
PYKUBELET_ROUTE_PROTOCOL = "112"  # the protocol number of the routes pykubelet's own pod network makes
ALL_NODES = 2


@pytest.fixture(scope="module")
def namespace(control_plane: ControlPlane):
    name = f"addons-{uuid.uuid4().hex[:6]}"
    control_plane.node.kubectl("create", "namespace", name)
    yield name
    control_plane.node.kubectl("delete", "namespace", name, "--wait=true", "--timeout=120s", check=False)


def pod(name: str, node: KubeadmNode, command: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}},
            "spec": {"nodeName": node.name, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "c", "image": BUSYBOX, "command": ["sh", "-c", command]}]}}


def apply(plane: ControlPlane, namespace: str, *objects: dict[str, Any]) -> None:
    manifest = plane.node.state / f"apply-{uuid.uuid4().hex[:8]}.json"
    manifest.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}))
    plane.node.kubectl("apply", "-n", namespace, "-f", str(manifest))


async def running(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        result = plane.node.kubectl("get", "pod", "-n", namespace, name, "-o", "json", check=False)
        if result.returncode != 0:
            return None
        obj = json.loads(result.stdout)
        conditions = obj["status"].get("conditions") or []
        return obj if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions) else None
    return await wait_for(ready, 120, f"pod {namespace}/{name} Ready", interval=0.5, describe=plane.describe)


def exec_in(plane: ControlPlane, namespace: str, name: str, command: str) -> str:
    """What a command prints in a pod (kubectl exec through the apiserver and the kubelet API)."""
    result = plane.node.kubectl("exec", "-n", namespace, name, "--", "sh", "-c", command, check=False)
    return result.stdout + result.stderr


async def answers(plane: ControlPlane, namespace: str, client: str, url: str, expected: str, what: str) -> None:
    """The client pod fetches url until it gets `expected` (new rules and DNS records take a moment).
    (`timeout`, not wget's -T: that crashes this busybox.)"""
    await wait_for(lambda: expected in exec_in(plane, namespace, client, f"timeout 5 wget -qO- {url}"), 60, what,
                   interval=1, describe=lambda: exec_in(plane, namespace, client, f"timeout 5 wget -O- {url}"))


def flannel_up(plane: ControlPlane, node: KubeadmNode) -> dict[str, Any] | None:
    """The Node once flanneld has annotated it, marked its network up, written subnet.env and routed
    the other node's podCIDR; None before."""
    obj = plane.kubectl_json("get", "node", node.name)
    conditions = {c["type"]: c for c in obj["status"].get("conditions") or []}
    up = ("flannel.alpha.coreos.com/backend-type" in obj["metadata"].get("annotations", {})
          and conditions.get("NetworkUnavailable", {}).get("reason") == "FlannelIsUp"
          and node.exists("/run/flannel/subnet.env") and "dev flannel.1" in node.sh("ip", "route", "show").stdout)
    return obj if up else None


async def test_nodes_are_not_ready_until_flannel_writes_its_config_and_pykubelet_leaves_its_routes_alone(
        control_plane: ControlPlane, worker: KubeadmNode):
    cp = control_plane.node
    # before `kubectl apply -f kube-flannel.yml`: the kubelet's own words
    assert control_plane.not_ready_before_cni[cp.name] == CNI_NOT_READY
    for node in (cp, worker):
        # A node turns Ready once flannel's init container has written the CNI config (within 100 ms,
        # as the kubelet's first Ready is); flanneld itself comes up a moment later.
        obj = await wait_for(lambda: flannel_up(control_plane, node), 60,
                             f"flanneld up on {node.name} with a route to the other node", interval=0.5,
                             describe=control_plane.describe)
        annotations = obj["metadata"]["annotations"]
        assert annotations["flannel.alpha.coreos.com/backend-type"] == "vxlan"
        assert annotations["flannel.alpha.coreos.com/public-ip"] == node.ip
        conditions = {c["type"]: c for c in obj["status"]["conditions"]}
        assert conditions["NetworkUnavailable"]["reason"] == "FlannelIsUp"
        assert conditions["Ready"]["status"] == "True"
        # each node's own view of what the DaemonSet wrote through hostPath
        assert node.exists("/etc/cni/net.d/10-flannel.conflist") and node.exists("/opt/cni/bin/flannel")
        assert node.exists("/run/flannel/subnet.env")
        assert f"FLANNEL_SUBNET={obj['spec']['podCIDR'].rsplit('.', 1)[0]}" in node.read("/run/flannel/subnet.env").decode()
        # flannel routes the other node's podCIDR through its VXLAN device; pykubelet added none
        routes = node.sh("ip", "route", "show").stdout
        assert "dev flannel.1" in routes, routes
        assert node.sh("ip", "route", "show", "proto", PYKUBELET_ROUTE_PROTOCOL).stdout.strip() == ""
    assert not os.path.exists("/etc/cni/net.d/10-flannel.conflist")  # the machine's own stays as it was


async def test_pods_on_two_nodes_reach_each_other_through_flannels_vxlan(control_plane: ControlPlane,
                                                                        worker: KubeadmNode, namespace: str):
    apply(control_plane, namespace, pod("server", worker, SERVE, {"app": "server"}),
          {**pod("client", control_plane.node, "sleep 3600"),
           "spec": {**pod("client", control_plane.node, "sleep 3600")["spec"],
                    "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]}})
    server = await running(control_plane, namespace, "server")
    client = await running(control_plane, namespace, "client")
    prefix = POD_SUBNET.split(".")[:2]
    assert server["status"]["podIP"].split(".")[:2] == prefix and client["status"]["podIP"].split(".")[:2] == prefix
    assert server["status"]["podIP"].split(".")[2] != client["status"]["podIP"].split(".")[2]  # two podCIDRs
    await answers(control_plane, namespace, "client", f"http://{server['status']['podIP']}:8080/", "server",
                  "the client on the control-plane node fetching from the server pod on the worker")


async def test_coredns_answers_and_services_work_through_kube_proxy(control_plane: ControlPlane,
                                                                   worker: KubeadmNode, namespace: str):
    # kubeadm's CoreDNS, its readiness probe (/ready) passing on pykubelet
    assert deployment_available(control_plane, "kube-system", "coredns")
    assert daemon_set_ready(control_plane, "kube-system", "kube-proxy", ALL_NODES)
    apply(control_plane, namespace, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
                                     "spec": {"selector": {"app": "server"}, "ports": [{"port": 80, "targetPort": 8080}]}})
    lookup = await wait_for(lambda: (lambda out: out if "10.96.0.1" in out else None)(
        exec_in(control_plane, namespace, "client", "nslookup kubernetes.default.svc.cluster.local")), 60,
        "CoreDNS resolving kubernetes.default", interval=1)
    assert "10.96.0.10" in lookup  # asked the kube-dns Service
    # the kubernetes Service leads to the apiserver (kube-proxy's rules on the control-plane node)
    out = exec_in(control_plane, namespace, "client", "nc -w 5 kubernetes.default 443 </dev/null && echo connected")
    assert "connected" in out, out
    await answers(control_plane, namespace, "client", f"http://web.{namespace}.svc.cluster.local/", "server",
                  "the web Service by its name, through kube-proxy")
    await answers(control_plane, namespace, "client", "http://web/", "server",
                  "the web Service by its short name (the pod's search path)")


async def test_kubectl_top_shows_nodes_and_pods_through_metrics_server(control_plane: ControlPlane,
                                                                      worker: KubeadmNode):
    cp = control_plane.node
    cp.kubectl("apply", "-f", str(ADDONS / "metrics-server.yaml"))
    # its readiness probe passes only once it has scraped the kubelets (verifying their certificates)
    await wait_for(lambda: deployment_available(control_plane, "kube-system", "metrics-server"), 180,
                   "metrics-server Ready", interval=2, describe=lambda: control_plane.describe(cp, worker) +
                   cp.kubectl("logs", "-n", "kube-system", "deploy/metrics-server", "--tail=30", check=False).stdout)

    def top(*args: str) -> str:
        result = cp.kubectl("top", *args, check=False)
        return result.stdout if result.returncode == 0 else ""
    nodes = await wait_for(lambda: (lambda out: out if cp.name in out and worker.name in out else None)(top("node")),
                           120, "kubectl top node listing both nodes", interval=2)
    for line in nodes.splitlines()[1:]:
        name, cpu, _, memory, _ = line.split()
        assert cpu.endswith("m") and memory.endswith("Mi") and int(memory[:-2]) > 0, nodes
    pods = await wait_for(lambda: (lambda out: out if "coredns-" in out else None)(top("pod", "-n", "kube-system")),
                          120, "kubectl top pod listing CoreDNS", interval=2)
    assert "kube-apiserver-" + cp.name in pods


async def test_pykubelet_proxy_daemonset_takes_over_from_kube_proxy(control_plane: ControlPlane,
                                                                    worker: KubeadmNode, namespace: str):
    cp = control_plane.node
    cp.kubectl("delete", "daemonset", "-n", "kube-system", "kube-proxy", "--wait=true", "--timeout=90s")
    cp.kubectl("apply", "-f", str(ADDONS / "pykubelet-proxy.yaml"))
    await wait_for(lambda: daemon_set_ready(control_plane, "kube-system", "pykubelet-proxy", ALL_NODES), 180,
                   "pykubelet-proxy Ready on every node", interval=1, describe=lambda: control_plane.describe(cp, worker))
    # a Service made now exists only in the rules of the proxy that runs now
    apply(control_plane, namespace, pod("server2", worker, SERVE, {"app": "server2"}),
          {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web2"},
           "spec": {"selector": {"app": "server2"}, "ports": [{"port": 80, "targetPort": 8080}]}})
    await running(control_plane, namespace, "server2")
    await answers(control_plane, namespace, "client", f"http://web2.{namespace}.svc.cluster.local/", "server2",
                  "a new Service, through pykubelet proxy")
    out = exec_in(control_plane, namespace, "client", "nc -w 5 kubernetes.default 443 </dev/null && echo connected")
    assert "connected" in out, out
    for node in (cp, worker):
        healthz = node.sh("curl", "-s", "--max-time", "5", f"http://{node.ip}:10256/healthz", check=False).stdout
        assert json.loads(healthz).get("lastUpdated"), healthz
