"""The Node's status as the kubelet reports it: conditions with the kubelet's reasons and
messages, capacity/allocatable, addresses and nodeInfo. Pure functions of what was observed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from pykubelet.node.hostinfo import HostInfo
from pykubelet.node.pressure import Pressure, Threshold

KUBELET_PORT = 10250

# type -> (reason when False, message when False, reason when True, message when True)
_PRESSURE_WORDING = {
    "MemoryPressure": ("KubeletHasSufficientMemory", "kubelet has sufficient memory available",
                       "KubeletHasInsufficientMemory", "kubelet has insufficient memory available"),
    "DiskPressure": ("KubeletHasNoDiskPressure", "kubelet has no disk pressure",
                     "KubeletHasDiskPressure", "kubelet has disk pressure"),
    "PIDPressure": ("KubeletHasSufficientPID", "kubelet has sufficient PID available",
                    "KubeletHasInsufficientPID", "kubelet has insufficient PID available"),
}


@dataclass
class NodeHealth:
    """What keeps the node from being Ready, in the kubelet's words, and resource pressure."""

    runtime_errors: list[str] = field(default_factory=list)
    network_errors: list[str] = field(default_factory=list)
    pressure: Pressure = field(default_factory=Pressure)

    def ready(self) -> tuple[bool, str, str]:
        """(ready, reason, message) of the Ready condition."""
        errs = list(dict.fromkeys(self.runtime_errors + self.network_errors))  # each cause once
        if not errs:
            return True, "KubeletReady", "kubelet is posting ready status"
        return False, "KubeletNotReady", errs[0] if len(errs) == 1 else "[" + ", ".join(errs) + "]"


def observe_runtime_conditions(health: NodeHealth, reported: Iterable[Any]) -> None:
    """The runtime's Status conditions into the node's health, as the kubelet reads them: only
    RuntimeReady and NetworkReady count, and one that is missing is not ready. Others are the
    runtime's own news (containerd 2.x reports ContainerdHasNoDeprecationWarnings=false on a
    cgroup v1 host) and never make the node NotReady."""
    by_type = {c.type: c for c in reported}
    for kind, errors, what in (("RuntimeReady", health.runtime_errors, "container runtime not ready"),
                               ("NetworkReady", health.network_errors, "container runtime network not ready")):
        cond = by_type.get(kind)
        if cond is None:
            errors.append(f"{what}: {kind} not reported")
        elif not cond.status:
            errors.append(f"{what}: {kind}=false reason:{cond.reason} message:{cond.message}")


def conditions(health: NodeHealth, previous: list[dict[str, Any]], now: str) -> list[dict[str, Any]]:
    """The four node conditions; lastTransitionTime moves only when a status flips."""
    before = {c["type"]: c for c in previous}
    out = []
    flags = {"MemoryPressure": health.pressure.memory, "DiskPressure": health.pressure.disk,
             "PIDPressure": health.pressure.pid}
    for kind, on in flags.items():
        off_reason, off_message, on_reason, on_message = _PRESSURE_WORDING[kind]
        out.append(_condition(kind, on, on_reason if on else off_reason, on_message if on else off_message,
                              before.get(kind), now))
    ready, reason, message = health.ready()
    out.append(_condition("Ready", ready, reason, message, before.get("Ready"), now))
    return out


def is_ready(status: dict[str, Any]) -> bool:
    """The node status says Ready=True."""
    return any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", []))


def _condition(kind: str, true: bool, reason: str, message: str, before: dict[str, Any] | None,
               now: str) -> dict[str, Any]:
    status = "True" if true else "False"
    transition = before["lastTransitionTime"] if before and before.get("status") == status else now
    return {"type": kind, "status": status, "reason": reason, "message": message,
            "lastHeartbeatTime": now, "lastTransitionTime": transition}


def _kibibytes(n: int) -> str:
    return f"{max(n, 0) // 1024}Ki"


def _reserved(threshold: Threshold | None, capacity: int) -> int:
    if threshold is None:
        return 0
    return int(capacity * threshold.percent / 100) if threshold.percent else threshold.quantity


def capacity_and_allocatable(info: HostInfo, max_pods: int,
                             thresholds: dict[str, Threshold]) -> tuple[dict[str, str], dict[str, str]]:
    """Allocatable is capacity less the hard eviction thresholds, as with the kubelet's defaults."""
    capacity = {"cpu": str(info.cpus), "memory": _kibibytes(info.memory_bytes),
                "ephemeral-storage": _kibibytes(info.ephemeral_storage_bytes), "pods": str(max_pods),
                "hugepages-1Gi": "0", "hugepages-2Mi": "0"}
    allocatable = dict(capacity)
    allocatable["memory"] = _kibibytes(allocatable_memory_bytes(info, thresholds))
    allocatable["ephemeral-storage"] = str(max(
        info.ephemeral_storage_bytes - _reserved(thresholds.get("nodefs.available"), info.ephemeral_storage_bytes), 0))
    return capacity, allocatable


def allocatable_memory_bytes(info: HostInfo, thresholds: dict[str, Threshold]) -> int:
    return max(info.memory_bytes - _reserved(thresholds.get("memory.available"), info.memory_bytes), 0)


def node_info(info: HostInfo, runtime_version: str, kubelet_version: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "machineID": info.machine_id, "systemUUID": info.system_uuid, "bootID": info.boot_id,
        "kernelVersion": info.kernel_version, "osImage": info.os_image,
        "containerRuntimeVersion": runtime_version, "kubeletVersion": kubelet_version,
        "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": info.architecture}
    if info.swap_bytes > 0:  # the kubelet's NodeSwap (GA, locked on): only a node with swap says so
        out["swap"] = {"capacity": info.swap_bytes}
    return out


def addresses(node_ip: str, hostname: str) -> list[dict[str, str]]:
    out = [{"type": "InternalIP", "address": node_ip}] if node_ip else []
    return out + [{"type": "Hostname", "address": hostname}]


def node_labels(node_name: str, arch: str, extra: dict[str, str]) -> dict[str, str]:
    labels = {"kubernetes.io/hostname": node_name, "kubernetes.io/os": "linux", "kubernetes.io/arch": arch,
              "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": arch}
    labels.update(extra)
    return labels
