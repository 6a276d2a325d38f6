"""One Debian 12 VM, systemd as PID 1, cgroup v2: provisioned as the Vagrantfile provisions a node
(`make install` included), then run as a standalone node by kubelet.service: the unit tells
systemd it is ready, a static pod runs in its pod slice under the systemd cgroup driver with
its limits and stats, and restarting or stopping the unit stops no pod.

The part of the VM tier `make test` runs; the tests run in order on one VM.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from tests.helpers import wait_for
from tests.vm.conftest import boot, journal, provision
from tests.vm.machine import Machine

CONFIG = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
          "cgroupDriver": "systemd", "staticPodPath": "/etc/kubernetes/manifests",
          "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
          "authorization": {"mode": "AlwaysAllow"}}
# No kubeadm here: the admin's own drop-in runs the kubelet with its config file alone.
STANDALONE_DROP_IN = "[Service]\nExecStart=\nExecStart=/usr/bin/kubelet --config=/var/lib/kubelet/config.yaml\n"
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sleeper"},
       "spec": {"terminationGracePeriodSeconds": 2, "containers": [{
           "name": "main", "image": "docker.io/library/busybox:1.36", "command": ["sh", "-c", "sleep 100000"],
           "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}}}]}}
MEMORY_LIMIT = 64 * 2**20


@pytest.fixture(scope="module")
def node(vm_bed, private_ports):
    machine = boot(vm_bed, "pkl-node", 10, *private_ports)
    try:
        provision(machine, "node.sh")
        yield machine
    finally:
        machine.down()


def write(machine: Machine, path: str, text: str) -> None:
    machine.ssh(f"mkdir -p $(dirname {path}) && cat > {path} <<'PKL_EOF'\n{text}\nPKL_EOF")


def unit(machine: Machine) -> dict[str, str]:
    out = machine.ssh("systemctl show kubelet -p Type -p ActiveState -p SubState -p StatusText -p MainPID "
                      "-p NRestarts", timeout=60).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def pods(machine: Machine) -> dict[str, dict[str, Any]]:
    result = machine.ssh("curl -sf http://127.0.0.1:10248/pods", check=False, timeout=60)
    if result.returncode != 0:
        return {}
    return {p["metadata"]["name"]: p for p in json.loads(result.stdout)["items"]}


def running_pod(machine: Machine) -> dict[str, Any] | None:
    pod = pods(machine).get("sleeper-pkl-node")
    statuses = (pod or {}).get("status", {}).get("containerStatuses") or []
    return pod if statuses and "running" in statuses[0].get("state", {}) else None


def test_pykubelet_is_installed_as_the_kubelet_of_a_systemd_machine_on_cgroup_v2(node):
    facts = node.ssh("ps -p 1 -o comm=; stat -fc %T /sys/fs/cgroup; systemctl is-enabled kubelet; "
                     "readlink /usr/bin/kubelet; /usr/bin/kubelet --version").stdout.split("\n")
    assert facts[:4] == ["systemd", "cgroup2fs", "enabled", "/opt/pykubelet/venv/bin/pykubelet"], facts
    assert "pykubelet" in facts[4]
    # systemd's own judgement of the units we ship (syntax, directives, the programs they run)
    verify = node.ssh("cd /usr/local/lib/systemd/system && systemd-analyze verify kubelet.service kube-proxy.service",
                      check=False)
    assert verify.returncode == 0 and not verify.stderr.strip(), verify.stderr


def test_the_unit_starts_and_tells_systemd_once_it_serves(node):
    write(node, "/var/lib/kubelet/config.yaml", yaml.safe_dump(CONFIG))
    write(node, "/etc/systemd/system/kubelet.service.d/20-standalone.conf", STANDALONE_DROP_IN)
    write(node, "/etc/kubernetes/manifests/sleeper.yaml", yaml.safe_dump(POD))
    # Type=notify: `systemctl start` returns once READY=1 came (or fails at TimeoutStartSec)
    started = node.ssh("systemctl daemon-reload && systemctl start kubelet", timeout=400, check=False)
    assert started.returncode == 0, f"{started.stderr}\n{journal(node)}"
    state = unit(node)
    assert (state["Type"], state["ActiveState"], state["SubState"]) == ("notify", "active", "running"), state
    assert state["StatusText"].startswith("serving;"), state  # our READY=1 datagram's STATUS


async def test_a_static_pod_runs_in_its_pod_slice_with_its_limits_and_stats(node):
    pod = await wait_for(lambda: running_pod(node), 300, "the static pod Running", interval=3,
                         describe=lambda: journal(node))
    uid = pod["metadata"]["uid"].replace("-", "_")
    slice_dir = (f"/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid}.slice")
    facts = node.ssh(f"systemctl is-active kubepods-burstable-pod{uid}.slice; cat {slice_dir}/memory.max "
                     f"{slice_dir}/cpu.weight; cat {slice_dir}/cri-containerd-*.scope/cgroup.procs | wc -l").stdout.split()
    assert facts[0] == "active" and int(facts[1]) == MEMORY_LIMIT, facts  # the slice systemd made for us
    assert int(facts[2]) == 2, facts  # 50m CPU: 51 shares, weight 2
    assert int(facts[3]) >= 2, facts  # the pause process and the container's, in their scopes
    summary = json.loads(node.ssh("curl -skf https://127.0.0.1:10250/stats/summary", timeout=60).stdout)
    stats = next(p for p in summary["pods"] if p["podRef"]["name"] == "sleeper-pkl-node")
    assert stats["memory"]["workingSetBytes"] > 0 and stats["cpu"]["usageCoreNanoSeconds"] > 0, stats
    assert summary["node"]["memory"]["workingSetBytes"] > 0


async def test_restarting_the_unit_restarts_no_pod(node):
    before = running_pod(node)
    assert before is not None
    pid = unit(node)["MainPID"]
    assert node.ssh("systemctl restart kubelet", timeout=400, check=False).returncode == 0, journal(node)
    assert unit(node)["MainPID"] != pid
    after = await wait_for(lambda: running_pod(node), 300, "the pod seen again", interval=3,
                           describe=lambda: journal(node))
    was, now = before["status"]["containerStatuses"][0], after["status"]["containerStatuses"][0]
    assert now["containerID"] == was["containerID"] and now["restartCount"] == 0, (was, now)


async def test_stopping_the_unit_leaves_the_pod_running_and_a_start_adopts_it(node):
    before = running_pod(node)
    assert before is not None
    container = before["status"]["containerStatuses"][0]["containerID"].split("://")[1]
    node.ssh("systemctl stop kubelet", timeout=200)
    assert unit(node)["ActiveState"] == "inactive"
    tasks = node.ssh("ctr -n k8s.io tasks ls", timeout=60).stdout
    assert any(line.startswith(container) and "RUNNING" in line for line in tasks.splitlines()), tasks
    assert node.ssh("systemctl start kubelet", timeout=400, check=False).returncode == 0, journal(node)
    after = await wait_for(lambda: running_pod(node), 300, "the pod adopted", interval=3,
                           describe=lambda: journal(node))
    assert after["status"]["containerStatuses"][0]["containerID"].endswith(container)


async def test_a_removed_pod_takes_its_slice_with_it(node):
    pod = running_pod(node) or await wait_for(lambda: running_pod(node), 300, "the pod Running", interval=3)
    uid = pod["metadata"]["uid"].replace("-", "_")
    unit_name = f"kubepods-burstable-pod{uid}.slice"
    node.ssh("rm /etc/kubernetes/manifests/sleeper.yaml")

    def slice_gone() -> bool:
        result = node.ssh(f"systemctl is-active {unit_name}; test -e /sys/fs/cgroup/kubepods.slice/"
                          f"kubepods-burstable.slice/{unit_name} && echo present || echo absent", check=False)
        return result.stdout.split() == ["inactive", "absent"]
    await wait_for(slice_gone, 300, f"{unit_name} stopped by systemd and its cgroup gone", interval=3,
                   describe=lambda: journal(node))
    assert "sleeper-pkl-node" not in pods(node)
