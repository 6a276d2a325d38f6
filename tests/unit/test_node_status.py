"""The Node status users see in `kubectl describe node`: conditions, capacity/allocatable, addresses, labels."""

from __future__ import annotations

import dataclasses

import pytest

from pykubelet.api.eviction import Threshold, parse_thresholds
from pykubelet.api.quantity import quantity_bytes
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.node.hostinfo import HostInfo
from pykubelet.node.pressure import Pressure
from pykubelet.node.status import (NodeHealth, addresses, capacity_and_allocatable, conditions, node_info, node_labels,
                                   observe_runtime_conditions)

GI = 2**30
EARLIER = "2024-05-01T10:00:00Z"
NOW = "2024-05-01T10:05:00Z"


def host(cpus: int = 4, memory: int = 8 * GI, disk: int = 100 * GI) -> HostInfo:
    return HostInfo(cpus=cpus, memory_bytes=memory, ephemeral_storage_bytes=disk, machine_id="m1",
                    system_uuid="u1", boot_id="b1", kernel_version="6.1.0", os_image="Debian GNU/Linux 12",
                    architecture="amd64")


def by_type(conds: list[dict]) -> dict[str, dict]:
    return {c["type"]: c for c in conds}


def condition(kind: str, status: str, when: str = EARLIER) -> dict:
    return {"type": kind, "status": status, "reason": "r", "message": "m",
            "lastHeartbeatTime": when, "lastTransitionTime": when}


# --- Ready ---

def test_healthy_node_is_ready_with_the_kubelets_words():
    assert NodeHealth().ready() == (True, "KubeletReady", "kubelet is posting ready status")


@pytest.mark.parametrize("runtime_errors, network_errors, message", [
    (["container runtime is down"], [], "container runtime is down"),
    ([], ["container runtime network not ready: NetworkReady=false"],
     "container runtime network not ready: NetworkReady=false"),
    (["container runtime is down"], ["network not ready"], "[container runtime is down, network not ready]"),
    (["a", "b"], ["c"], "[a, b, c]"),
], ids=["one-runtime-error", "one-network-error", "runtime-and-network", "three"])
def test_not_ready_node_gives_its_errors_as_the_message(runtime_errors, network_errors, message):
    health = NodeHealth(runtime_errors=runtime_errors, network_errors=network_errors)
    assert health.ready() == (False, "KubeletNotReady", message)


# --- conditions ---

def test_conditions_are_the_four_kubelet_types_in_order():
    assert [c["type"] for c in conditions(NodeHealth(), [], NOW)] == [
        "MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]


@pytest.mark.parametrize("pressure, kind, status, reason, message", [
    (Pressure(), "MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    (Pressure(memory=True), "MemoryPressure", "True", "KubeletHasInsufficientMemory",
     "kubelet has insufficient memory available"),
    (Pressure(), "DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    (Pressure(disk=True), "DiskPressure", "True", "KubeletHasDiskPressure", "kubelet has disk pressure"),
    (Pressure(), "PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    (Pressure(pid=True), "PIDPressure", "True", "KubeletHasInsufficientPID", "kubelet has insufficient PID available"),
])
def test_pressure_conditions_use_the_kubelets_reasons_and_messages(pressure, kind, status, reason, message):
    cond = by_type(conditions(NodeHealth(pressure=pressure), [], NOW))[kind]
    assert (cond["status"], cond["reason"], cond["message"]) == (status, reason, message)


def test_one_pressure_does_not_touch_the_others():
    conds = by_type(conditions(NodeHealth(pressure=Pressure(disk=True)), [], NOW))
    assert {k: c["status"] for k, c in conds.items()} == {
        "MemoryPressure": "False", "DiskPressure": "True", "PIDPressure": "False", "Ready": "True"}


def test_ready_condition_carries_the_ready_wording():
    ready = by_type(conditions(NodeHealth(runtime_errors=["container runtime is down"]), [], NOW))["Ready"]
    assert (ready["status"], ready["reason"], ready["message"]) == (
        "False", "KubeletNotReady", "container runtime is down")


def test_first_report_sets_both_times_to_now():
    for cond in conditions(NodeHealth(), [], NOW):
        assert cond["lastHeartbeatTime"] == NOW and cond["lastTransitionTime"] == NOW


def test_unchanged_status_keeps_its_transition_time_and_refreshes_the_heartbeat():
    previous = [condition("MemoryPressure", "False"), condition("DiskPressure", "False"),
                condition("PIDPressure", "False"), condition("Ready", "True")]
    for cond in conditions(NodeHealth(), previous, NOW):
        assert (cond["lastHeartbeatTime"], cond["lastTransitionTime"]) == (NOW, EARLIER), cond["type"]


@pytest.mark.parametrize("health, kind, before", [
    (NodeHealth(runtime_errors=["container runtime is down"]), "Ready", "True"),
    (NodeHealth(), "Ready", "False"),
    (NodeHealth(), "Ready", "Unknown"),   # the node controller's mark after missed heartbeats
    (NodeHealth(pressure=Pressure(memory=True)), "MemoryPressure", "False"),
    (NodeHealth(), "DiskPressure", "True"),
    (NodeHealth(pressure=Pressure(pid=True)), "PIDPressure", "False"),
])
def test_flipped_status_moves_its_transition_time_to_now(health, kind, before):
    cond = by_type(conditions(health, [condition(kind, before)], NOW))[kind]
    assert cond["status"] != before
    assert (cond["lastHeartbeatTime"], cond["lastTransitionTime"]) == (NOW, NOW)


def test_a_flip_in_one_condition_leaves_the_others_transition_times_alone():
    previous = [condition("MemoryPressure", "False"), condition("DiskPressure", "False"),
                condition("PIDPressure", "False"), condition("Ready", "True")]
    conds = by_type(conditions(NodeHealth(pressure=Pressure(disk=True)), previous, NOW))
    assert {k: c["lastTransitionTime"] for k, c in conds.items()} == {
        "MemoryPressure": EARLIER, "DiskPressure": NOW, "PIDPressure": EARLIER, "Ready": EARLIER}


# --- capacity and allocatable ---

def test_capacity_reports_the_machine():
    capacity, _ = capacity_and_allocatable(host(cpus=4, memory=8 * GI, disk=100 * GI), 110, {})
    assert capacity == {"cpu": "4", "memory": "8388608Ki", "ephemeral-storage": "104857600Ki", "pods": "110",
                        "hugepages-1Gi": "0", "hugepages-2Mi": "0"}


def test_capacity_rounds_memory_down_to_whole_kibibytes():
    capacity, _ = capacity_and_allocatable(host(memory=8 * GI + 1023), 110, {})
    assert capacity["memory"] == "8388608Ki"


def test_without_thresholds_allocatable_is_capacity():
    capacity, allocatable = capacity_and_allocatable(host(), 110, {})
    assert {k: v for k, v in allocatable.items() if k != "ephemeral-storage"} == {
        k: v for k, v in capacity.items() if k != "ephemeral-storage"}
    assert quantity_bytes(allocatable["ephemeral-storage"]) == 100 * GI


def test_allocatable_memory_is_capacity_less_the_memory_threshold():
    _, allocatable = capacity_and_allocatable(host(memory=8 * GI), 110,
                                              parse_thresholds({"memory.available": "100Mi"}))
    assert allocatable["memory"] == f"{(8 * GI - 100 * 2**20) // 1024}Ki"


def test_percentage_memory_threshold_is_a_share_of_capacity():
    _, allocatable = capacity_and_allocatable(host(memory=10 * GI), 110, {"memory.available": Threshold(
        "memory.available", percent=10)})
    assert quantity_bytes(allocatable["memory"]) == 9 * GI


def test_allocatable_ephemeral_storage_is_capacity_less_the_nodefs_threshold():
    _, allocatable = capacity_and_allocatable(host(disk=100 * GI), 110,
                                              parse_thresholds({"nodefs.available": "10%"}))
    assert quantity_bytes(allocatable["ephemeral-storage"]) == 90 * GI


def test_the_kubelets_defaults_leave_cpu_and_pods_whole():
    capacity, allocatable = capacity_and_allocatable(host(cpus=2), 30, parse_thresholds(
        {"memory.available": "100Mi", "nodefs.available": "10%", "imagefs.available": "15%"}))
    assert (allocatable["cpu"], allocatable["pods"]) == ("2", "30")
    assert allocatable["memory"] == "8286208Ki"


@pytest.mark.parametrize("resource, signal", [("memory", "memory.available"),
                                              ("ephemeral-storage", "nodefs.available")])
def test_allocatable_never_goes_below_zero(resource, signal):
    """A threshold bigger than the machine leaves nothing allocatable, not a negative amount the apiserver refuses."""
    _, allocatable = capacity_and_allocatable(host(memory=1 * GI, disk=1 * GI), 110,
                                              {signal: Threshold(signal, quantity=2 * GI)})
    assert quantity_bytes(allocatable[resource]) == 0


# --- addresses, labels, nodeInfo ---

def test_addresses_list_the_internal_ip_then_the_hostname():
    assert addresses("192.168.1.10", "node-1") == [{"type": "InternalIP", "address": "192.168.1.10"},
                                                   {"type": "Hostname", "address": "node-1"}]


def test_unknown_node_ip_leaves_only_the_hostname():
    assert addresses("", "node-1") == [{"type": "Hostname", "address": "node-1"}]


def test_node_labels_name_the_host_os_and_arch_also_under_beta_keys():
    assert node_labels("node-1", "arm64", {}) == {
        "kubernetes.io/hostname": "node-1", "kubernetes.io/os": "linux", "kubernetes.io/arch": "arm64",
        "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "arm64"}


def test_extra_node_labels_are_added_and_override_the_defaults():
    labels = node_labels("node-1", "amd64", {"node-role.kubernetes.io/edge": "", "kubernetes.io/hostname": "edge1"})
    assert labels["node-role.kubernetes.io/edge"] == ""
    assert labels["kubernetes.io/hostname"] == "edge1"
    assert labels["kubernetes.io/arch"] == "amd64"


def test_node_info_reports_the_host_and_versions():
    assert node_info(host(), "containerd://1.7.13", "v1.30.0-pykubelet") == {
        "machineID": "m1", "systemUUID": "u1", "bootID": "b1", "kernelVersion": "6.1.0",
        "osImage": "Debian GNU/Linux 12", "containerRuntimeVersion": "containerd://1.7.13",
        "kubeletVersion": "v1.30.0-pykubelet", "kubeProxyVersion": "", "operatingSystem": "linux",
        "architecture": "amd64"}
    # a node with swap reports how much, as the kubelet's NodeSwap does; one without says nothing
    with_swap = dataclasses.replace(host(), swap_bytes=512 * 2**20)
    assert node_info(with_swap, "containerd://1.7.13", "v1")["swap"] == {"capacity": 536870912}


def test_only_runtime_ready_and_network_ready_count_and_a_missing_one_is_not_ready():
    health = NodeHealth()
    # containerd 2.x on a cgroup v1 host: its own deprecation condition is false; the node is Ready.
    observe_runtime_conditions(health, [api.RuntimeCondition(type="RuntimeReady", status=True),
                                        api.RuntimeCondition(type="NetworkReady", status=True),
                                        api.RuntimeCondition(type="ContainerdHasNoDeprecationWarnings",
                                                             status=False, reason="ContainerdHasDeprecationWarnings")])
    assert health.ready()[0]
    observe_runtime_conditions(health, [api.RuntimeCondition(type="NetworkReady", status=False,
                                                             reason="NetworkPluginNotReady",
                                                             message="cni plugin not initialized")])
    assert health.runtime_errors == ["container runtime not ready: RuntimeReady not reported"]
    assert health.network_errors == ["container runtime network not ready: NetworkReady=false "
                                     "reason:NetworkPluginNotReady message:cni plugin not initialized"]
