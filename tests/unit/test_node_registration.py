"""The Node the agent creates (--register-with-taints and --provider-id, set once at creation) and
its first Ready."""

from __future__ import annotations

import asyncio

from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.node.hostinfo import HostInfo
from pykubelet.node.manager import NodeManager
from tests.fakes.kube import FakeKube
from tests.helpers import wait_for

HOST = HostInfo(cpus=2, memory_bytes=2**30, ephemeral_storage_bytes=2**34, machine_id="m", system_uuid="u",
                boot_id="b", kernel_version="6.1", os_image="Debian", architecture="amd64")


def manager(kube: FakeKube, **kwargs) -> NodeManager:
    return NodeManager(kube, None, None, node_name="n1", host_info=HOST, node_ip="10.0.0.1", labels={},  # type: ignore[arg-type]
                       max_pods=110, thresholds={}, kubelet_version="v1.36.0",
                       update_seconds=10, report_seconds=300, lease_seconds=40, agent_errors=list, **kwargs)


async def test_a_new_node_gets_the_taints_and_provider_id_it_was_told():
    kube = FakeKube()
    taints = [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]
    node = await manager(kube, taints=taints, provider_id="kind://docker/kind/n1")._create_or_reconcile()
    assert node["spec"] == {"taints": taints, "providerID": "kind://docker/kind/n1"}


async def test_an_existing_node_keeps_its_taints():
    """The kubelet registers taints only when it creates the Node: an admin's later change stays."""
    kube = FakeKube()
    await manager(kube, taints=[{"key": "a", "effect": "NoSchedule"}])._create_or_reconcile()
    kube.objects["/api/v1/nodes/n1"]["spec"]["taints"] = []
    node = await manager(kube, taints=[{"key": "a", "effect": "NoSchedule"}])._create_or_reconcile()
    assert node["spec"]["taints"] == []


async def test_no_taints_and_no_provider_id_leave_the_spec_empty():
    assert (await manager(FakeKube())._create_or_reconcile())["spec"] == {}


class NetworkComesUp:
    """A runtime whose pod network is not ready until `up` is set (a CNI DaemonSet writing its config)."""

    def __init__(self) -> None:
        self.up = False

    async def status(self) -> api.StatusResponse:
        return api.StatusResponse(status=api.RuntimeStatus(conditions=[
            api.RuntimeCondition(type="RuntimeReady", status=True),
            api.RuntimeCondition(type="NetworkReady", status=self.up, reason="" if self.up else "NetworkPluginNotReady")]))

    async def version(self) -> api.VersionResponse:
        return api.VersionResponse(runtime_name="containerd", runtime_version="1.6.20")


class Events:
    def __init__(self) -> None:
        self.reasons: list[str] = []

    def record(self, ref, kind, reason, message) -> None:
        self.reasons.append(reason)


def ready_posted(kube: FakeKube) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True"
               for patch in kube.patches() for c in patch["status"]["conditions"])


async def test_the_first_ready_is_posted_at_once_not_at_the_next_status_period():
    """The kubelet's fast status update: kubeadm and a CNI DaemonSet's rollout wait on the node's
    first Ready, which would otherwise wait up to nodeStatusUpdateFrequency (10 s here)."""
    kube, runtime = FakeKube(), NetworkComesUp()
    node = manager(kube)
    node.cri, node.recorder = runtime, Events()  # type: ignore[assignment]
    await node._create_or_reconcile()
    loop = asyncio.create_task(node._status_loop())
    try:
        await wait_for(lambda: kube.patches(), 2, "the first (NotReady) status")
        assert not ready_posted(kube)
        runtime.up = True
        await wait_for(lambda: ready_posted(kube), 2, "Ready posted well before the 10 s period")
    finally:
        loop.cancel()
