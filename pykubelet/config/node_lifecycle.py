"""Settings for the node's own life: graceful node shutdown and swap (the kubelet's
shutdownGracePeriod*, failSwapOn and memorySwap), with their parsers and the kubelet's checks
across them. node/shutdown.py and runtime/swap.py act on them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pykubelet.util.durations import format_duration

NO_SWAP, LIMITED_SWAP = "NoSwap", "LimitedSwap"


@dataclass(frozen=True)
class PriorityGracePeriod:
    """One row of shutdownGracePeriodByPodPriority: pods of at least `priority` (up to the next
    row's) get `seconds` to stop when the node shuts down."""

    priority: int
    seconds: int


@dataclass
class ShutdownSettings:
    """Graceful node shutdown: off unless grace_period > 0 or by_pod_priority is set."""

    grace_period: float = 0.0
    """shutdownGracePeriod, seconds: how long the node's shutdown is delayed for its pods in all."""
    grace_period_critical_pods: float = 0.0
    """shutdownGracePeriodCriticalPods, seconds: the part of it kept for critical pods, stopped last."""
    by_pod_priority: list[PriorityGracePeriod] = field(default_factory=list)
    """shutdownGracePeriodByPodPriority: instead of the two above, one period per priority class."""


@dataclass
class SwapSettings:
    fail_swap_on: bool = True
    """failSwapOn / --fail-swap-on: refuse to start while the node has swap on."""
    swap_behavior: str = ""
    """memorySwap.swapBehavior: "" or NoSwap (containers never swap) or LimitedSwap (Burstable
    containers may swap in proportion to their memory request; cgroup v2 only)."""


def swap_behavior(value: Any) -> str:
    if value not in ("", NO_SWAP, LIMITED_SWAP):
        raise ValueError(f"must be {NO_SWAP} or {LIMITED_SWAP}, got {value!r}")
    return value


def grace_periods_by_priority(value: Any) -> list[PriorityGracePeriod]:
    """A YAML list of {priority, shutdownGracePeriodSeconds}, both integers."""
    if not isinstance(value, list):
        raise ValueError(f"must be a list of {{priority, shutdownGracePeriodSeconds}}, got {value!r}")
    rows = []
    for i, item in enumerate(value):
        numbers = [item.get(key) if isinstance(item, dict) else None
                   for key in ("priority", "shutdownGracePeriodSeconds")]
        if any(isinstance(n, bool) or not isinstance(n, int) for n in numbers):
            raise ValueError(f"item {i}: needs integers priority and shutdownGracePeriodSeconds, got {item!r}")
        rows.append(PriorityGracePeriod(*numbers))
    return rows


def check_shutdown(s: ShutdownSettings) -> str:
    """The kubelet's validation of the shutdown settings: the problem, or ""."""
    total, critical = s.grace_period, s.grace_period_critical_pods
    for name, seconds in (("shutdownGracePeriod", total), ("shutdownGracePeriodCriticalPods", critical)):
        if 0 < seconds < 1:
            return f"{name} {format_duration(seconds)} must be 0 or at least 1s"
    if critical > total:
        return (f"shutdownGracePeriodCriticalPods {format_duration(critical)} must be <= shutdownGracePeriod "
                f"{format_duration(total)}")
    if s.by_pod_priority and (total or critical):
        return ("shutdownGracePeriodByPodPriority cannot be set together with shutdownGracePeriod or "
                "shutdownGracePeriodCriticalPods")
    if any(row.seconds < 0 for row in s.by_pod_priority):
        return "shutdownGracePeriodByPodPriority: shutdownGracePeriodSeconds must be >= 0"
    return ""
