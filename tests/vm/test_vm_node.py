"""One Debian 12 VM, systemd as PID 1, cgroup v2, brought up by Vagrant from the project's own
Vagrantfile as `make vagrant-up` does it (tests/vm/vagrant.py; the control plane alone,
PKL_WORKERS=0): pykubelet installed as kubelet.service with kubeadm's drop-in and config, `kubeadm
init` running etcd, the apiserver, the controller-manager and the scheduler as static pods under
the systemd cgroup driver, kubeadm's CoreDNS and `pykubelet proxy` as kube-proxy.service. Then a
pod in its slice with its limits and stats, resolving kubernetes.default through CoreDNS and
reaching it through the proxy, `systemctl restart kubelet` restarting no pod, the
watchdog, `systemctl stop kubelet` taking the node NotReady while every pod runs on, a start
adopting them.

The part of the VM tier `make test` runs, through Vagrant so that the Vagrantfile itself (its box,
synced folders, network and provider settings) is exercised on every run; `make vagrant-test`
adds a worker, DNS and Services across nodes and a node shutdown, `make vm-cluster-test` the same
provisioning on plain qemu. The tests run in order on one VM.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.helpers import wait_for
from tests.vm.conftest import journal
from tests.vm.kubeadm_cluster import (CONTROL_PLANE_PODS, Cluster, resolves_kubernetes_default_and_reaches_it,
                                      restart_counts, running)
from tests.vm.machine import Node
from tests.vm.vagrant import vagrant_cluster

NODE = "pkl-cp"  # the Vagrantfile's control plane
MEMORY_LIMIT = 64 * 2**20
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sleeper", "namespace": "default"},
       "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 2, "tolerations": [{"operator": "Exists"}],
                "containers": [{
                    "name": "main", "image": "docker.io/library/busybox:1.36", "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", "sleep 100000"],
                    "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}}}]}}


@pytest.fixture(scope="module")
def cluster():
    with vagrant_cluster(workers=0) as made:
        yield made


def unit(machine: Node) -> dict[str, str]:
    out = machine.ssh("systemctl show kubelet -p Type -p ActiveState -p SubState -p StatusText -p MainPID "
                      "-p NRestarts", timeout=60).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def pod_slice(uid: str) -> tuple[str, str]:
    """The Burstable pod's slice under the systemd driver: its unit name and its cgroup directory."""
    name = f"kubepods-burstable-pod{uid.replace('-', '_')}.slice"
    return name, f"/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/{name}"


def test_pykubelet_is_installed_as_the_kubelet_of_a_systemd_machine_on_cgroup_v2(cluster: Cluster):
    facts = cluster.cp.ssh("ps -p 1 -o comm=; stat -fc %T /sys/fs/cgroup; systemctl is-enabled kubelet; "
                           "readlink /usr/bin/kubelet; /usr/bin/kubelet --version").stdout.split("\n")
    assert facts[:4] == ["systemd", "cgroup2fs", "enabled", "/opt/pykubelet/venv/bin/pykubelet"], facts
    assert "pykubelet" in facts[4]
    # systemd's own judgement of the units we ship (syntax, directives, the programs they run)
    verify = cluster.cp.ssh("cd /usr/local/lib/systemd/system && "
                            "systemd-analyze verify kubelet.service kube-proxy.service", check=False)
    assert verify.returncode == 0 and not verify.stderr.strip(), verify.stderr


async def test_kubeadm_init_runs_the_control_plane_on_pykubelet_under_the_systemd_driver(cluster: Cluster):
    state = unit(cluster.cp)
    # Type=notify: kubeadm's `systemctl restart kubelet` returned once our READY=1 came
    assert (state["Type"], state["ActiveState"], state["SubState"]) == ("notify", "active", "running"), state
    assert state["StatusText"].startswith("serving;"), state  # our READY=1 datagram's STATUS
    await wait_for(lambda: cluster.ready(NODE), 300, f"{NODE} Ready", interval=5, describe=cluster.describe)
    await wait_for(lambda: running(cluster, tuple(f"{p}-{NODE}" for p in CONTROL_PLANE_PODS)), 300,
                   "the control-plane pods Running and Ready", interval=5, describe=cluster.describe)
    facts = cluster.cp.ssh("grep cgroupDriver /var/lib/kubelet/config.yaml; "
                           "ls /sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice | grep -c 'pod.*slice$'"
                           ).stdout.split("\n")
    assert facts[0].strip() == "cgroupDriver: systemd", facts
    assert int(facts[1]) >= 3, facts  # the apiserver's, the controller-manager's, the scheduler's (Burstable)


async def test_a_pod_runs_in_its_pod_slice_with_its_limits_and_stats(cluster: Cluster):
    cluster.cp.ssh(f"echo {json.dumps(json.dumps(POD))} | kubectl --kubeconfig /etc/kubernetes/admin.conf "
                   "apply -f -", timeout=120)
    pod = (await wait_for(lambda: running(cluster, ("sleeper",)), 300, "the pod Running", interval=5,
                          describe=cluster.describe))["sleeper"]
    name, directory = pod_slice(pod["metadata"]["uid"])
    facts = cluster.cp.ssh(f"systemctl is-active {name}; cat {directory}/memory.max {directory}/cpu.weight; "
                           f"cat {directory}/cri-containerd-*.scope/cgroup.procs | wc -l").stdout.split()
    assert facts[0] == "active" and int(facts[1]) == MEMORY_LIMIT, facts  # the slice systemd made for us
    assert int(facts[2]) == 2, facts  # 50m CPU: 51 shares, weight 2
    assert int(facts[3]) >= 2, facts  # the pause process and the container's, in their scopes
    # the kubelet API, through the apiserver's node proxy as `kubectl top` reaches it
    summary = json.loads(cluster.kubectl("get", "--raw", f"/api/v1/nodes/{NODE}/proxy/stats/summary"))
    stats = next(p for p in summary["pods"] if p["podRef"]["name"] == "sleeper")
    assert stats["memory"]["workingSetBytes"] > 0 and stats["cpu"]["usageCoreNanoSeconds"] > 0, stats
    assert summary["node"]["memory"]["workingSetBytes"] > 0


async def test_the_pod_resolves_kubernetes_default_through_coredns_and_reaches_it_through_the_proxy(
        cluster: Cluster):
    # the cluster as `vagrant up` makes it by default: kubeadm's CoreDNS, `pykubelet proxy` (iptables)
    await resolves_kubernetes_default_and_reaches_it(cluster, "sleeper")


async def test_restarting_the_unit_restarts_no_pod(cluster: Cluster):
    before = restart_counts(cluster)
    pid = unit(cluster.cp)["MainPID"]
    since = time.time()
    assert cluster.cp.ssh("systemctl restart kubelet", timeout=400, check=False).returncode == 0, journal(cluster.cp)
    assert unit(cluster.cp)["MainPID"] != pid
    await wait_for(lambda: cluster.ready(NODE, since), 300, f"{NODE} Ready after the restart", interval=5,
                   describe=cluster.describe)
    assert restart_counts(cluster) == before


async def test_with_watchdogsec_set_the_agent_pings_systemd_and_is_never_killed_for_silence(cluster: Cluster):
    # An admin's drop-in, as `systemctl edit kubelet` writes it; systemd then kills and restarts
    # a unit that goes WatchdogSec without a WATCHDOG=1 (the agent pings at half of it).
    cluster.cp.ssh("mkdir -p /etc/systemd/system/kubelet.service.d && printf '[Service]\\nWatchdogSec=20s\\n' "
                   "> /etc/systemd/system/kubelet.service.d/30-watchdog.conf && systemctl daemon-reload && "
                   "systemctl restart kubelet", timeout=400)
    before = unit(cluster.cp)

    def last_ping() -> int:
        out = cluster.cp.ssh("systemctl show kubelet -p WatchdogTimestampMonotonic --value", timeout=60).stdout
        return int(out.strip() or 0)  # microseconds; 0 until the first WATCHDOG=1
    first = await wait_for(last_ping, 60, "a first WATCHDOG=1", interval=2, describe=lambda: journal(cluster.cp))
    # pings for longer than WatchdogSec: a silent agent would have been killed in that time
    await wait_for(lambda: last_ping() - first > 25_000_000, 90, "WATCHDOG=1 still coming 25 s later", interval=3,
                   describe=lambda: journal(cluster.cp))
    after = unit(cluster.cp)
    assert (after["MainPID"], after["NRestarts"], after["ActiveState"]) == (
        before["MainPID"], before["NRestarts"], "active"), (before, after)


async def test_stopping_the_unit_takes_the_node_not_ready_with_every_pod_running_and_a_start_adopts_them(
        cluster: Cluster):
    before = restart_counts(cluster)
    container = before["default/sleeper"][0].split("://")[1]
    cluster.cp.ssh("systemctl stop kubelet", timeout=200)
    assert unit(cluster.cp)["ActiveState"] == "inactive"
    tasks = cluster.cp.ssh("ctr -n k8s.io tasks ls", timeout=60).stdout
    assert any(line.startswith(container) and "RUNNING" in line for line in tasks.splitlines()), tasks
    # the node lifecycle controller (in a static pod that runs on) marks it after its grace period
    await wait_for(lambda: cluster.not_ready(NODE), 300, f"{NODE} NotReady", interval=5,
                   describe=cluster.describe)
    since = time.time()
    assert cluster.cp.ssh("systemctl start kubelet", timeout=400, check=False).returncode == 0, journal(cluster.cp)
    await wait_for(lambda: cluster.ready(NODE, since), 300, f"{NODE} Ready again", interval=5,
                   describe=cluster.describe)
    assert restart_counts(cluster) == before


async def test_a_deleted_pod_takes_its_slice_with_it(cluster: Cluster):
    uid = cluster.json("get", "pod", "sleeper")["metadata"]["uid"]
    name, directory = pod_slice(uid)
    cluster.kubectl("delete", "pod", "sleeper", "--wait=false")

    def slice_gone() -> bool:
        result = cluster.cp.ssh(f"systemctl is-active {name}; test -e {directory} && echo present || echo absent",
                                check=False)
        return result.stdout.split() == ["inactive", "absent"]
    await wait_for(slice_gone, 300, f"{name} stopped by systemd and its cgroup gone", interval=3,
                   describe=cluster.describe)
    await wait_for(lambda: "sleeper" not in cluster.kubectl("get", "pods", "-o", "name"), 120,
                   "the pod gone from the API", interval=3, describe=cluster.describe)
