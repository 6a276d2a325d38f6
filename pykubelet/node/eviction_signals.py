"""What the eviction manager reads from one Summary API snapshot (the /stats/summary shape, the
one source of the node's measurements): each signal's available amount and capacity, and each
pod's usage. Pure: a dict in, typed values out; a missing field means no observation, as the
kubelet has none for it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
INODES = "inodes"
PIDS = "pids"


@dataclass(frozen=True)
class Observation:
    available: int
    capacity: int


@dataclass(frozen=True)
class ContainerUsage:
    name: str
    memory: int | None = None
    """Working set bytes."""
    rootfs: int | None = None
    """Bytes of its writable layer."""
    logs: int | None = None
    inodes: int = 0

    @property
    def disk(self) -> int | None:
        """Writable layer plus logs; None when either is unknown (the eviction message leaves it out)."""
        return self.rootfs + self.logs if self.rootfs is not None and self.logs is not None else None


@dataclass(frozen=True)
class PodUsage:
    memory: int = 0
    """The pod cgroup's working set."""
    containers: tuple[ContainerUsage, ...] = ()
    volumes: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Volume name -> (bytes, inodes) used."""


def _pair(stats: dict[str, Any] | None, available: str, capacity: str) -> Observation | None:
    if not stats or not isinstance(stats.get(available), int) or not isinstance(stats.get(capacity), int):
        return None
    return Observation(stats[available], stats[capacity])


def observe(summary: dict[str, Any]) -> dict[str, Observation]:
    """Signal -> observation, as the kubelet derives them from the summary's node section:
    memory.available's capacity is available plus working set (the node's memory less what
    the root cgroup works with)."""
    node = summary.get("node") or {}
    out: dict[str, Observation | None] = {}
    memory = node.get("memory") or {}
    if isinstance(memory.get("availableBytes"), int) and isinstance(memory.get("workingSetBytes"), int):
        out["memory.available"] = Observation(memory["availableBytes"],
                                              memory["availableBytes"] + memory["workingSetBytes"])
    out["nodefs.available"] = _pair(node.get("fs"), "availableBytes", "capacityBytes")
    out["nodefs.inodesFree"] = _pair(node.get("fs"), "inodesFree", "inodes")
    image_fs = (node.get("runtime") or {}).get("imageFs")
    out["imagefs.available"] = _pair(image_fs, "availableBytes", "capacityBytes")
    out["imagefs.inodesFree"] = _pair(image_fs, "inodesFree", "inodes")
    rlimit = node.get("rlimit") or {}
    if isinstance(rlimit.get("maxpid"), int) and isinstance(rlimit.get("curproc"), int):
        out["pid.available"] = Observation(rlimit["maxpid"] - rlimit["curproc"], rlimit["maxpid"])
    return {signal: seen for signal, seen in out.items() if seen is not None}


def _used(stats: dict[str, Any] | None, key: str) -> int | None:
    value = (stats or {}).get(key)
    return value if isinstance(value, int) else None


def _container(stats: dict[str, Any]) -> ContainerUsage:
    rootfs, logs = stats.get("rootfs"), stats.get("logs")
    return ContainerUsage(stats.get("name", ""), _used(stats.get("memory"), "workingSetBytes"),
                          _used(rootfs, "usedBytes"), _used(logs, "usedBytes"),
                          (_used(rootfs, "inodesUsed") or 0) + (_used(logs, "inodesUsed") or 0))


def pod_usage(summary: dict[str, Any]) -> dict[str, PodUsage]:
    """Pod UID -> its usage, for the pods the summary has stats of (the others have none: the
    kubelet ranks those first)."""
    out = {}
    for pod in summary.get("pods") or []:
        uid = (pod.get("podRef") or {}).get("uid")
        if not uid:
            continue
        volumes = {v.get("name", ""): (_used(v, "usedBytes") or 0, _used(v, "inodesUsed") or 0)
                   for v in pod.get("volume") or []}
        out[uid] = PodUsage(_used(pod.get("memory"), "workingSetBytes") or 0,
                            tuple(_container(c) for c in pod.get("containers") or []), volumes)
    return out


def disk_usage(usage: PodUsage, local_volumes: set[str], resource: str) -> int:
    """What the pod uses of a disk resource (bytes, or inodes) on a node whose images, containers
    and pod directories share one filesystem: its containers' writable layers and logs, and its
    local volumes."""
    if resource == INODES:
        own = sum(c.inodes for c in usage.containers)
        return own + sum(inodes for name, (_, inodes) in usage.volumes.items() if name in local_volumes)
    own = sum((c.rootfs or 0) + (c.logs or 0) for c in usage.containers)
    return own + sum(used for name, (used, _) in usage.volumes.items() if name in local_volumes)
