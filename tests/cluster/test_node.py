"""The node as the cluster sees it: registration, Lease, Ready and its real causes."""

from __future__ import annotations

import os
import signal
import subprocess
from datetime import datetime

from tests.cluster.conftest import (REPO, apply, kubectl, kubectl_json, node_condition, node_object, running_pods,
                                    sleeper_deployment, wait_ready)
from tests.helpers import wait_for
from tests.runtime.conftest import NODE


async def test_node_registers_ready_with_runtime_version_and_capacity(node_agent):
    wide = kubectl("get", "nodes", "-o", "wide").stdout
    (row,) = [line for line in wide.splitlines() if line.split()[0] == NODE]
    assert " Ready " in row and "containerd://1.6" in row

    node = node_object()
    labels = node["metadata"]["labels"]
    assert labels["kubernetes.io/hostname"] == NODE and labels["kubernetes.io/os"] == "linux"
    assert labels["pykubelet.test/role"] == "worker"
    status = node["status"]
    assert int(status["capacity"]["cpu"]) == os.cpu_count()
    assert status["capacity"]["pods"] == "110" and status["allocatable"]["memory"].endswith("Ki")
    assert {a["type"] for a in status["addresses"]} == {"InternalIP", "Hostname"}
    info = status["nodeInfo"]
    assert info["bootID"] and info["kernelVersion"] == os.uname().release and info["architecture"] == "amd64"
    assert info["kubeletVersion"].startswith("v1.")
    for kind in ("MemoryPressure", "DiskPressure", "PIDPressure"):
        assert node_condition(node, kind)["status"] == "False"
    assert node_condition(node)["reason"] == "KubeletReady"


async def test_lease_is_renewed_every_ten_seconds(node_agent):
    def renew_time():
        lease = kubectl_json("get", "lease", NODE, "-n", "kube-node-lease")
        assert lease["spec"]["holderIdentity"] == NODE and lease["spec"]["leaseDurationSeconds"] == 40
        assert lease["metadata"]["ownerReferences"][0]["kind"] == "Node"
        return datetime.fromisoformat(lease["spec"]["renewTime"].replace("Z", "+00:00"))

    async def next_renewal(after):
        return await wait_for(lambda: (t := renew_time()) > after and t, 15, "the lease to be renewed",
                              describe=node_agent.describe)

    # The lease may still hold an earlier agent's renewal: time two renewals of this one.
    first = await next_renewal(renew_time())
    second = await next_renewal(first)
    assert 8 <= (second - first).total_seconds() <= 12


def _containerd_pid() -> int:
    return int(open("/run/pykubelet/containerd.pid").read())


async def test_runtime_down_makes_the_node_not_ready_and_back(node_agent, namespace, cri):
    apply(sleeper_deployment(namespace, replicas=1))
    (pod,) = await wait_for(lambda: running_pods(namespace, 1), 60, "a Running pod", describe=node_agent.describe)
    container_id = pod["status"]["containerStatuses"][0]["containerID"]

    os.kill(_containerd_pid(), signal.SIGTERM)
    try:
        cond = await wait_for(lambda: (c := node_condition(node_object())).get("status") == "False" and c, 40,
                              "Ready=False while containerd is down", describe=node_agent.describe)
        assert cond["reason"] == "KubeletNotReady" and "container runtime is down" in cond["message"]
    finally:
        subprocess.run(["bash", str(REPO / "tests" / "bed" / "setup.sh")], check=True, capture_output=True,
                       timeout=120)
    await wait_for(lambda: node_condition(node_object()).get("status") == "True", 40,
                   "Ready again after containerd came back", describe=node_agent.describe)
    (again,) = await wait_for(lambda: running_pods(namespace, 1), 30, "the pod still Running")
    assert again["status"]["containerStatuses"][0]["containerID"] == container_id, "a pod was restarted"
    assert again["status"]["containerStatuses"][0]["restartCount"] == 0


async def test_stopped_agent_makes_the_node_unknown(node_agent):
    node_agent.stop()
    cond = await wait_for(lambda: (c := node_condition(node_object())).get("status") == "Unknown" and c, 90,
                          "Ready=Unknown from the node lifecycle controller", describe=node_agent.describe)
    assert cond["reason"] == "NodeStatusUnknown"
    node_agent.start()
    await wait_ready(node_agent, 60, "Ready after restart")
