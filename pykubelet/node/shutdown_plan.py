"""Who stops when, in a graceful node shutdown (the kubelet's arithmetic, no I/O): the settings
become priority groups, each pod joins one, and each group gets its own budget, lowest priority
first. shutdownGracePeriod and shutdownGracePeriodCriticalPods are two groups: priority 0 with
what critical pods leave over, and system-critical priority (2000000000) with their share.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from pykubelet.api.pod import Pod
from pykubelet.config.node_lifecycle import PriorityGracePeriod, ShutdownSettings
from pykubelet.runtime.resources import SYSTEM_CRITICAL_PRIORITY, priority

DEFAULT_PRIORITY = 0  # a pod's priority when no default PriorityClass exists
SHUTDOWN_REASON = "Terminated"
SHUTDOWN_MESSAGE = "Pod was terminated in response to imminent node shutdown."
SHUTTING_DOWN = "node is shutting down"


@dataclass
class ShutdownGroup:
    period: PriorityGracePeriod
    pods: list[Pod] = field(default_factory=list)


def grace_periods(s: ShutdownSettings) -> list[PriorityGracePeriod]:
    """The groups, by priority; empty when graceful shutdown is off."""
    if s.by_pod_priority:
        return sorted(s.by_pod_priority, key=lambda row: row.priority)
    if s.grace_period <= 0 or s.grace_period_critical_pods > s.grace_period:
        return []
    regular = int(s.grace_period - s.grace_period_critical_pods)
    return [PriorityGracePeriod(DEFAULT_PRIORITY, regular),
            PriorityGracePeriod(SYSTEM_CRITICAL_PRIORITY, int(s.grace_period) - regular)]


def period_requested(periods: list[PriorityGracePeriod]) -> int:
    """Seconds the whole shutdown may take: what logind's InhibitDelayMaxSec must allow."""
    return sum(row.seconds for row in periods)


def group_pods(periods: list[PriorityGracePeriod], pods: list[Pod]) -> list[ShutdownGroup]:
    """Each pod in the group of the highest priority not above its own (the lowest group when
    its priority is below them all); the groups in the order they are stopped."""
    groups = [ShutdownGroup(row) for row in periods]
    if not groups:
        return groups
    priorities = [row.priority for row in periods]
    for pod in pods:
        index = max(bisect.bisect_right(priorities, priority(pod)) - 1, 0)
        groups[index].pods.append(pod)
    return groups


def pod_grace(pod: Pod, group_seconds: int) -> int:
    """The group's budget, or the pod's own grace period when that is shorter."""
    return min(pod.termination_grace_period_seconds, group_seconds)
