"""Kubelet-side admission: may this node run the pod next to the ones it already runs?

The kubelet's checks and wording: resource pressure first (under MemoryPressure alone a BestEffort
pod is refused unless it tolerates the memory-pressure taint; under any other pressure every
pod is; critical pods never are: reason Evicted, "The node had condition: [...]. "), then
sysctls (SysctlForbidden), then the pod's OS (its kubernetes.io/os label, then spec.os.name: this node runs linux), then resources (pods, cpu, memory: OutOfpods, OutOfcpu,
OutOfmemory with "Node didn't have enough resource: ..."), then the node name, then host
ports (reason NodePorts), and last a node shutting down turns every pod away (NodeShutdown).
A rejected pod is Failed with "Pod was rejected: <message>".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from pykubelet.api.pod import Pod
from pykubelet.api.sysctls import FORBIDDEN_REASON, SysctlAllowlist
from pykubelet.runtime.resources import BEST_EFFORT, is_critical, qos_class


NODE_OS = "linux"
OS_LABEL = "kubernetes.io/os"
MEMORY_PRESSURE = "MemoryPressure"
MEMORY_PRESSURE_TAINT = "node.kubernetes.io/memory-pressure"
NODE_SHUTDOWN = ("NodeShutdown", "Pod was rejected as the node is shutting down.")


@dataclass(frozen=True)
class Allocatable:
    pods: int
    cpu_millis: int
    memory_bytes: int


@dataclass(frozen=True)
class Rejection:
    reason: str
    message: str


def _requests(pod: Pod) -> tuple[int, int]:
    return (sum(c.cpu_request_millis for c in pod.containers), sum(c.memory_request_bytes for c in pod.containers))


def _host_ports(pod: Pod) -> set[tuple[str, str, int]]:
    return {(p.host_ip or "0.0.0.0", p.protocol, p.host_port) for p in pod.host_port_mappings()}


def _ports_conflict(wanted: set[tuple[str, str, int]], used: set[tuple[str, str, int]]) -> bool:
    """Same port and protocol, on the same address or where either side binds every address."""
    return any(port == used_port and protocol == used_protocol and (ip == used_ip or "0.0.0.0" in (ip, used_ip))
               for ip, protocol, port in wanted for used_ip, used_protocol, used_port in used)


def _insufficient(resource: str, requested: int, used: int, capacity: int) -> Rejection:
    return Rejection(f"OutOf{resource}", f"Node didn't have enough resource: {resource}, requested: {requested}, "
                                         f"used: {used}, capacity: {capacity}")


def _tolerates_no_schedule(toleration: Any, key: str) -> bool:
    """A toleration of the taint key:NoSchedule (a taint with no value)."""
    if not isinstance(toleration, dict) or toleration.get("effect") not in (None, "", "NoSchedule"):
        return False
    if toleration.get("operator") == "Exists":
        return toleration.get("key") in (None, "", key)
    return toleration.get("key") == key and not toleration.get("value")


def pressure_rejection(pod: Pod, conditions: Sequence[str]) -> Rejection | None:
    """The eviction manager's admission: what the node's pressure conditions allow."""
    if not conditions or is_critical(pod):
        return None
    if list(conditions) == [MEMORY_PRESSURE]:
        tolerations = (pod.raw.get("spec") or {}).get("tolerations") or []
        if qos_class(pod) != BEST_EFFORT or any(_tolerates_no_schedule(t, MEMORY_PRESSURE_TAINT) for t in tolerations):
            return None
    return Rejection("Evicted", f"The node had condition: [{' '.join(conditions)}]. ")


def resources_fit(pod: Pod, others: list[Pod], allocatable: Allocatable) -> Rejection | None:
    """The cpu and memory requests against what the other pods request (also a resize's check)."""
    cpu, memory = _requests(pod)
    used_cpu = sum(_requests(p)[0] for p in others)
    used_memory = sum(_requests(p)[1] for p in others)
    if cpu and used_cpu + cpu > allocatable.cpu_millis:
        return _insufficient("cpu", cpu, used_cpu, allocatable.cpu_millis)
    if memory and used_memory + memory > allocatable.memory_bytes:
        return _insufficient("memory", memory, used_memory, allocatable.memory_bytes)
    return None


def admit(pod: Pod, running: Iterable[Pod], node_name: str, allocatable: Allocatable,
          sysctls: SysctlAllowlist | None = None, pressure: Sequence[str] = (),
          shutting_down: bool = False) -> Rejection | None:
    """None if the pod fits; else the first reason the kubelet would give.

    `sysctls`: what pods may set (default: the safe sysctls of this kernel); `pressure`: the
    node's pressure conditions now (MemoryPressure, DiskPressure, PIDPressure); `shutting_down`:
    a graceful node shutdown is under way (node/shutdown.py).
    """
    if rejection := pressure_rejection(pod, pressure):
        return rejection
    forbidden = (sysctls or SysctlAllowlist.build()).forbidden(pod.sysctls, pod.host_network, pod.host_ipc)
    if forbidden:
        return Rejection(FORBIDDEN_REASON, forbidden)
    if pod.labels.get(OS_LABEL, NODE_OS) != NODE_OS:
        return Rejection("PodOSSelectorNodeLabelDoesNotMatch",
                         f"Failed to admit pod as the `{OS_LABEL}` label doesn't match node label")
    if ((pod.raw.get("spec") or {}).get("os") or {}).get("name", NODE_OS) != NODE_OS:
        return Rejection("PodOSNotSupported", "Failed to admit pod as the OS field doesn't match node OS")
    others = list(running)
    if len(others) + 1 > allocatable.pods:
        return _insufficient("pods", 1, len(others), allocatable.pods)
    if (misfit := resources_fit(pod, others, allocatable)) is not None:
        return misfit
    if pod.node_name and pod.node_name != node_name:
        return Rejection("NodeName", "Predicate NodeName failed: node(s) didn't match the requested node name")
    used_ports: set[tuple[str, str, int]] = set()
    for other in others:
        used_ports |= _host_ports(other)
    if _ports_conflict(_host_ports(pod), used_ports):
        return Rejection("NodePorts",
                         "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports")
    if shutting_down:
        return Rejection(*NODE_SHUTDOWN)
    return None
