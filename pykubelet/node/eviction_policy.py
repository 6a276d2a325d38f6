"""The eviction manager's decisions, with the kubelet's rules; pure (observations in, decisions out).

One pass: the thresholds met now, plus those met before that have not yet recovered their
minimum reclaim; node conditions are those of the met thresholds, kept for the pressure
transition period after they were last seen; thresholds drive evictions once met for their
grace period (hard ones at once), memory first. Pods are ranked for the starved resource
(memory: usage above requests first, then lower priority, then more usage above requests;
disk: the same with ephemeral-storage) and the first that is not critical is evicted, with
the kubelet's message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from pykubelet.api.eviction import Threshold
from pykubelet.api.pod import Container, Pod
from pykubelet.api.quantity import format_quantity, quantity_bytes
from pykubelet.node.eviction_signals import (
    EPHEMERAL_STORAGE, INODES, MEMORY, PIDS, Observation, PodUsage, disk_usage,
)
from pykubelet.runtime.resources import priority, requests_and_limits

REASON = "Evicted"
IMMEDIATE_GRACE_SECONDS = 1  # hard thresholds: the kubelet's immediate eviction grace period
MEMORY_PRESSURE, DISK_PRESSURE, PID_PRESSURE = "MemoryPressure", "DiskPressure", "PIDPressure"
CONDITIONS = (MEMORY_PRESSURE, DISK_PRESSURE, PID_PRESSURE)  # the order conditions are named in

SIGNAL_RESOURCE = {"memory.available": MEMORY, "nodefs.available": EPHEMERAL_STORAGE, "nodefs.inodesFree": INODES,
                   "imagefs.available": EPHEMERAL_STORAGE, "imagefs.inodesFree": INODES, "pid.available": PIDS}
SIGNAL_CONDITION = {"memory.available": MEMORY_PRESSURE, "nodefs.available": DISK_PRESSURE,
                    "nodefs.inodesFree": DISK_PRESSURE, "imagefs.available": DISK_PRESSURE,
                    "imagefs.inodesFree": DISK_PRESSURE, "pid.available": PID_PRESSURE}
DISK_SIGNALS = frozenset({"nodefs.available", "nodefs.inodesFree", "imagefs.available", "imagefs.inodesFree"})
IMAGEFS_SIGNALS = frozenset({"imagefs.available", "imagefs.inodesFree"})


def reclaims_images(signal: str, dedicated_image_fs: bool) -> bool:
    """Whether removing unused images can relieve a disk signal: always when images share the
    root dir's filesystem; only the imagefs signals when images have a filesystem of their own
    (freeing that would not give the root dir's filesystem a byte, so the kubelet does nothing
    at node level for nodefs then)."""
    return signal in DISK_SIGNALS and (not dedicated_image_fs or signal in IMAGEFS_SIGNALS)


@dataclass(frozen=True)
class EvictionState:
    """What one pass hands to the next."""

    met: tuple[Threshold, ...] = ()
    """The thresholds that were past their grace period: they hold until their minimum reclaim is back."""
    first_observed: Mapping[Threshold, float] = field(default_factory=dict)
    condition_seen: Mapping[str, float] = field(default_factory=dict)
    """Node condition -> when a threshold of it was last met."""


@dataclass(frozen=True)
class Decision:
    state: EvictionState
    conditions: tuple[str, ...]
    """The node's pressure conditions now, in CONDITIONS order."""
    actionable: tuple[Threshold, ...]
    """Thresholds met for their grace period, memory first: the first drives this pass."""


def thresholds_met(thresholds: Iterable[Threshold], observations: Mapping[str, Observation],
                   with_min_reclaim: bool = False) -> list[Threshold]:
    out = []
    for threshold in thresholds:
        seen = observations.get(threshold.signal)
        if seen is None:
            continue
        test = threshold.unresolved if with_min_reclaim else threshold.crossed
        if test(seen.available, seen.capacity):
            out.append(threshold)
    return out


def decide(thresholds: Iterable[Threshold], observations: Mapping[str, Observation], state: EvictionState,
           now: float, transition_period: float) -> Decision:
    """One pass of the kubelet's synchronize, up to choosing what to reclaim."""
    met = thresholds_met(thresholds, observations)
    met += [t for t in thresholds_met(state.met, observations, with_min_reclaim=True) if t not in met]
    first_observed = {t: state.first_observed.get(t, now) for t in met}
    seen = dict(state.condition_seen)
    seen.update({SIGNAL_CONDITION[t.signal]: now for t in met})
    conditions = tuple(c for c in CONDITIONS if c in seen and now - seen[c] < transition_period)
    ripe = [t for t, at in first_observed.items() if now - at >= t.grace_period]
    actionable = sorted(ripe, key=lambda t: SIGNAL_RESOURCE[t.signal] != MEMORY)  # stable: memory first
    return Decision(EvictionState(tuple(ripe), first_observed, seen), conditions, tuple(actionable))


# --- ranking

def _request(pod: Pod, resource: str) -> int:
    """The pod's request of a resource: its containers' sum, or its largest init container's."""
    def each(container: Container) -> int:
        return quantity_bytes(requests_and_limits(container)[0].get(resource, 0))
    regular = sum(each(c) for c in pod.containers) + sum(each(c) for c in pod.init_containers if c.is_sidecar)
    return max([regular, *(each(c) for c in pod.init_containers if not c.is_sidecar)])


def _local_volumes(pod: Pod) -> set[str]:
    """Volumes that live on the node's disk: hostPath, emptyDir on disk, configMap, gitRepo."""
    out = set()
    for volume in (pod.raw.get("spec") or {}).get("volumes") or []:
        empty_dir = volume.get("emptyDir")
        if "hostPath" in volume or "configMap" in volume or "gitRepo" in volume or \
                isinstance(empty_dir, dict) and not empty_dir.get("medium"):
            out.add(volume.get("name", ""))
    return out


def _usage(pod: Pod, usage: PodUsage, resource: str) -> int:
    return usage.memory if resource == MEMORY else disk_usage(usage, _local_volumes(pod), resource)


def rank(pods: Iterable[Pod], usage: Mapping[str, PodUsage], resource: str) -> list[Pod]:
    """The pods in the order the kubelet evicts them for a starved resource. Pods without stats
    come first; PID pressure ranks by priority alone (no per-pod process counts here)."""
    def key(pod: Pod) -> tuple[int, int, int]:
        stats = usage.get(pod.uid)
        if resource == PIDS:
            return 0, priority(pod), 0
        if stats is None:
            return -1, priority(pod), 0
        used = _usage(pod, stats, resource)
        exceeds = used > _request(pod, resource)
        # The amount over requests subtracts the ephemeral-storage request for inodes too (the kubelet's).
        over = used - _request(pod, MEMORY if resource == MEMORY else EPHEMERAL_STORAGE)
        return 0 if exceeds else 1, priority(pod), -over
    return sorted(pods, key=key)


def grace_override(threshold: Threshold, pod: Pod, max_pod_grace_seconds: int) -> int:
    """Hard thresholds kill at once; soft ones give min(evictionMaxPodGracePeriod, the pod's),
    at least a second, as the pod workers enforce."""
    if not threshold.grace_period:
        return IMMEDIATE_GRACE_SECONDS
    return max(min(max_pod_grace_seconds, pod.termination_grace_period_seconds), 1)


# --- the words

def _format(resource: str, amount: int) -> str:
    return format_quantity(amount, binary=resource not in (INODES, PIDS))


def _request_text(container: Container, resource: str) -> tuple[int, str]:
    written = requests_and_limits(container)[0].get(resource)
    if written is None:
        return 0, "0"
    amount = quantity_bytes(written)
    return amount, format_quantity(amount, binary=str(written).strip().endswith("i"))


def eviction_message(resource: str, pod: Pod, usage: PodUsage | None, actionable: Iterable[Threshold],
                     observations: Mapping[str, Observation]) -> str:
    """The kubelet's message: the starved resource, the threshold met, and each container using
    more of it than it requested."""
    message = f"The node was low on resource: {resource}. "
    for threshold in actionable:
        seen = observations.get(threshold.signal)
        if SIGNAL_RESOURCE[threshold.signal] == resource and seen is not None:
            limit = threshold.limit(seen.capacity)
            shown = format_quantity(limit, binary=not threshold.decimal) if not threshold.percent else \
                _format(resource, limit)
            message += f"Threshold quantity: {shown}, available: {_format(resource, seen.available)}. "
            break
    if usage is None:
        return message
    containers = {c.name: c for c in (*pod.containers, *pod.init_containers)}
    for stats in usage.containers:
        container = containers.get(stats.name)
        if container is None:
            continue
        used = stats.memory if resource == MEMORY else stats.disk if resource == EPHEMERAL_STORAGE else None
        request, request_text = _request_text(container, resource)
        if used is not None and used > request:
            message += (f"Container {container.name} was using {_format(resource, used)}, request is {request_text}, "
                        f"has larger consumption of {resource}. ")
    return message

