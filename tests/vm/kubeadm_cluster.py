"""`make vm-cluster-test`: the Vagrantfile's provisioning for real, on two Debian 12 VMs (systemd as PID 1,
cgroup v2): every node provisioned by vagrant/provision/node.sh, `kubeadm init` by
control-plane.sh with pykubelet running the control plane as static pods under the systemd
cgroup driver, `kubeadm join` of the worker by worker.sh. Then both nodes Ready, a pod on
each, `systemctl restart kubelet` restarting no pod, and `systemctl stop kubelet` taking the
worker NotReady until `systemctl start` brings it back.

Not collected by `make test` (the file name is not test_*.py): two VMs under emulation take
~11 minutes. tests/bench/vm.py times the same cluster.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import shlex
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator

import pytest

from tests.helpers import wait_for
from tests.vm.conftest import boot, journal, provision
from tests.vm.machine import Machine, Node

CONTROL_PLANE_PODS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


def new_token() -> str:
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    return "".join(secrets.choice(alphabet) for _ in range(6)) + "." + \
        "".join(secrets.choice(alphabet) for _ in range(16))


@contextlib.contextmanager
def one_node_cluster(vm_bed: Any, private_ports: Any, name: str, number: int) -> Iterator["Cluster"]:
    """A VM provisioned as the Vagrantfile's control plane (node.sh, control-plane.sh), until the block ends."""
    machine = boot(vm_bed, name, number, *private_ports)
    try:
        provision(machine, "node.sh")
        provision(machine, "control-plane.sh", PKL_NODE_IP=machine.ip, PKL_TOKEN=new_token())
        yield Cluster(machine)
    finally:
        machine.down()


class Cluster:
    """The cluster, seen through kubectl on the control-plane machine."""

    def __init__(self, cp: Node, worker: Node | None = None):
        self.cp, self.worker = cp, worker

    def kubectl(self, *args: str, check: bool = True) -> str:
        command = "kubectl --kubeconfig /etc/kubernetes/admin.conf --request-timeout=30s " + " ".join(args)
        return self.cp.ssh(command, timeout=120, check=check).stdout

    def json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json"))

    def ready(self, node: str, since: float = 0.0) -> bool:
        """The Node's Ready condition is True, from a heartbeat at or after `since` (unix time)."""
        try:
            conditions = self.json("get", "node", node)["status"].get("conditions") or []
        except (AssertionError, ValueError):
            return False
        for c in conditions:
            if c["type"] == "Ready":
                beat = time.mktime(time.strptime(c["lastHeartbeatTime"], "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
                return c["status"] == "True" and beat >= since - 1
        return False

    def not_ready(self, node: str) -> bool:
        conditions = self.json("get", "node", node)["status"].get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] != "True" for c in conditions)

    def describe(self) -> str:
        return (self.kubectl("get", "nodes,pods", "-A", "-o", "wide", check=False) + journal(self.cp) +
                (journal(self.worker) if self.worker else ""))


def up(vm_bed, private_ports: tuple[int, int], api_port: int | None = None, **provision_env: str) -> Cluster:
    """Both VMs booted and provisioned as `vagrant up` would: node.sh on each (at once), then
    control-plane.sh, then worker.sh with the CA hash control-plane.sh printed. `api_port`:
    the apiserver forwarded to 127.0.0.1 on the host too."""
    token = new_token()
    with ThreadPoolExecutor(2) as pool:
        ours, theirs = private_ports
        cp_boot = pool.submit(boot, vm_bed, "pkl-cp", 10, ours, theirs, {6443: api_port} if api_port else None)
        worker_boot = pool.submit(boot, vm_bed, "pkl-w1", 11, theirs, ours)
        cp, worker = cp_boot.result(), worker_boot.result()
        for done in [pool.submit(provision, cp, "node.sh"), pool.submit(provision, worker, "node.sh")]:
            done.result()
    out = provision(cp, "control-plane.sh", PKL_NODE_IP=cp.ip, PKL_TOKEN=token, **provision_env)
    ca_hash = re.search(r"--discovery-token-ca-cert-hash (sha256:[0-9a-f]{64})", out)
    assert ca_hash, out[-3000:]
    provision(worker, "worker.sh", PKL_NODE_IP=worker.ip, PKL_CP_IP=cp.ip, PKL_TOKEN=token,
              PKL_CA_HASH=ca_hash.group(1))
    return Cluster(cp, worker)


@pytest.fixture(scope="module")
def cluster(vm_bed, private_ports):
    try:
        yield up(vm_bed, private_ports)
    finally:  # by name: a VM that booted is downed even when up() failed half-way
        for name in ("pkl-cp", "pkl-w1"):
            Machine(name, 0, vm_bed[0], vm_bed[1], 0, 0).down()


def pod_on(node: str, name: str) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
                       "spec": {"nodeName": node, "terminationGracePeriodSeconds": 2,
                                "tolerations": [{"operator": "Exists"}],
                                "containers": [{"name": "main", "image": "docker.io/library/busybox:1.36",
                                                "imagePullPolicy": "IfNotPresent",
                                                "command": ["sh", "-c", "sleep 100000"]}]}})


def running(cluster: Cluster, names: tuple[str, ...]) -> dict[str, dict] | None:
    pods = {p["metadata"]["name"]: p for p in cluster.json("get", "pods", "-A")["items"]}
    wanted = {n: pods.get(n) for n in names}
    ok = all(p and p["status"].get("phase") == "Running" and all(
        s.get("ready") for s in p["status"].get("containerStatuses") or [{}]) for p in wanted.values())
    return wanted if ok else None  # type: ignore[return-value]


def restart_counts(cluster: Cluster) -> dict[str, tuple[str, int]]:
    return {f"{p['metadata']['namespace']}/{p['metadata']['name']}": (s["containerID"], s["restartCount"])
            for p in cluster.json("get", "pods", "-A")["items"] for s in p["status"].get("containerStatuses") or []}



def exec_in(cluster: Cluster, pod: str, command: str) -> str:
    return cluster.kubectl("exec", pod, "--", "sh", "-c", shlex.quote(command), check=False)


async def resolves_kubernetes_default_and_reaches_it(cluster: Cluster, pod: str) -> None:
    """The (busybox) pod resolves kubernetes.default through kubeadm's CoreDNS and connects to the
    apiserver by that name: its DNS Service and the apiserver's both through its node's proxy."""
    lookup = await wait_for(lambda: (lambda out: out if re.search(r"Address:?\s+10\.96\.0\.1\b", out) else None)(
        exec_in(cluster, pod, "nslookup kubernetes.default.svc.cluster.local")), 600,
        f"CoreDNS resolving kubernetes.default from {pod}", interval=5, describe=cluster.describe)
    assert "10.96.0.10" in lookup, lookup  # asked the kube-dns Service
    # the short name through the pod's search path, to the apiserver through the proxy
    out = exec_in(cluster, pod, "nc -w 5 kubernetes.default 443 </dev/null && echo connected")
    assert "connected" in out, out

async def test_init_runs_the_control_plane_on_pykubelet_under_the_systemd_driver(cluster: Cluster):
    cp = cluster.cp.name
    await wait_for(lambda: cluster.ready(cp), 300, f"{cp} Ready", interval=5, describe=cluster.describe)
    names = tuple(f"{p}-{cp}" for p in CONTROL_PLANE_PODS)
    await wait_for(lambda: running(cluster, names), 300, "the control-plane pods Running and Ready", interval=5,
                   describe=cluster.describe)
    facts = cluster.cp.ssh("grep cgroupDriver /var/lib/kubelet/config.yaml; readlink /usr/bin/kubelet; "
                           "ls /sys/fs/cgroup/kubepods.slice | grep -c 'pod.*slice$'").stdout.split("\n")
    assert facts[0].strip() == "cgroupDriver: systemd" and facts[1] == "/opt/pykubelet/venv/bin/pykubelet", facts
    assert int(facts[2]) >= 1, facts  # the control plane's Burstable pods are in kubepods-burstable.slice


async def test_the_worker_joins_and_each_node_runs_a_pod(cluster: Cluster):
    worker = cluster.worker.name
    await wait_for(lambda: cluster.ready(worker), 300, f"{worker} Ready", interval=5, describe=cluster.describe)
    assert not cluster.worker.ssh("test -e /etc/kubernetes/bootstrap-kubelet.conf", check=False).returncode == 0
    for node in (cluster.cp.name, worker):
        cluster.cp.ssh(f"echo {json.dumps(pod_on(node, f'sleeper-{node}'))} | "
                       "kubectl --kubeconfig /etc/kubernetes/admin.conf apply -f -", timeout=120)
    await wait_for(lambda: running(cluster, (f"sleeper-{cluster.cp.name}", f"sleeper-{worker}")), 300,
                   "a pod Running on each node", interval=5, describe=cluster.describe)
    wide = cluster.kubectl("get", "nodes", "-o", "wide")
    assert "containerd://" in wide and cluster.worker.ip in wide


async def test_restarting_the_kubelet_unit_restarts_no_pod(cluster: Cluster):
    before = restart_counts(cluster)
    for machine in (cluster.worker, cluster.cp):
        since = time.time()
        assert machine.ssh("systemctl restart kubelet", timeout=400, check=False).returncode == 0, journal(machine)
        await wait_for(lambda: cluster.ready(machine.name, since), 300, f"{machine.name} Ready after the restart",
                       interval=5, describe=cluster.describe)
    assert restart_counts(cluster) == before


async def test_stopping_the_kubelet_takes_the_node_not_ready_until_it_starts_again(cluster: Cluster):
    worker = cluster.worker.name
    cluster.worker.ssh("systemctl stop kubelet", timeout=200)
    # the node lifecycle controller marks it after its grace period (50 s)
    await wait_for(lambda: cluster.not_ready(worker), 300, f"{worker} NotReady", interval=5,
                   describe=cluster.describe)
    since = time.time()
    assert cluster.worker.ssh("systemctl start kubelet", timeout=400, check=False).returncode == 0
    await wait_for(lambda: cluster.ready(worker, since), 300, f"{worker} Ready again", interval=5,
                   describe=cluster.describe)
    assert running(cluster, (f"sleeper-{worker}",))
