"""The Node the agent creates: --register-with-taints and --provider-id, set once at creation."""

from __future__ import annotations

from pykubelet.node.hostinfo import HostInfo
from pykubelet.node.manager import NodeManager
from tests.fakes.kube import FakeKube

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
