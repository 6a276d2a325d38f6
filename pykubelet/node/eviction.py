"""The eviction manager: every 10 seconds (the kubelet's eviction monitoring period) it reads a
Summary API snapshot, reports the node's pressure conditions and, when a threshold has been met
for its grace period, reclaims: node-level first for disk (unused images), then it evicts one
pod, ranked as the kubelet ranks them (node/eviction_policy.py decides all of it), and waits up
to 30 seconds for that pod to be killed before the next pass.

It acts only through what it is handed: the summary, the active pods, the pod path's evict
call, the image reclaim, and an Event recorder.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Sequence

from pykubelet.api.eviction import Threshold
from pykubelet.api.pod import Pod
from pykubelet.kube.events import WARNING, EventRecorder, node_ref, pod_ref
from pykubelet.node import eviction_policy as policy
from pykubelet.node import eviction_signals as signals
from pykubelet.node.pressure import Pressure
from pykubelet.runtime.resources import is_critical
from pykubelet.util.log import get_logger

log = get_logger(__name__)

MONITORING_PERIOD = 10.0  # the kubelet's evictionMonitoringPeriod
CLEANUP_TIMEOUT, CLEANUP_POLL = 30.0, 1.0  # how long a pass waits for the evicted pod to be killed


@dataclass(frozen=True)
class PodPathCalls:
    """What the eviction manager asks of the pod path (pods/dispatcher.py has them)."""

    active_pods: Callable[[], list[Pod]]
    evict: Callable[[str, str, str, int], bool]
    """(uid, reason, message, grace seconds) -> whether the pod was there to evict."""
    eviction_done: Callable[[str], bool]


class EvictionManager:
    def __init__(self, thresholds: Sequence[Threshold], summary: Callable[[], Awaitable[dict[str, Any]]],
                 pods: PodPathCalls, recorder: EventRecorder, node_name: str, *,
                 reclaim_disk: Callable[[], Awaitable[None]] | None = None,
                 dedicated_image_fs: Callable[[], bool] = lambda: False, transition_period: float = 300.0,
                 max_pod_grace_seconds: int = 0, on_change: Callable[[], None] = lambda: None,
                 clock: Callable[[], float] = time.monotonic, period: float = MONITORING_PERIOD):
        self.thresholds = tuple(thresholds)
        self.summary = summary
        self.pods = pods
        self.recorder = recorder
        self.node_name = node_name
        self.reclaim_disk = reclaim_disk
        self.dedicated_image_fs = dedicated_image_fs  # blocking (it stats the filesystems): run off the loop
        self._dedicated: bool | None = None  # asked once, on the first disk reclaim, as the kubelet does
        self.transition_period = transition_period
        self.max_pod_grace_seconds = max_pod_grace_seconds
        self.on_change = on_change  # the conditions changed: report the node's status now
        self.clock = clock
        self.period = period
        self.state = policy.EvictionState()
        self.conditions: tuple[str, ...] = ()

    def pressure(self) -> Pressure:
        return Pressure.of(self.conditions)

    async def run(self) -> None:
        """A pass now and every period until cancelled; a pass that fails is logged, never the end."""
        if not self.thresholds:
            return
        while True:
            try:
                evicted = await self.synchronize()
                if evicted is not None:
                    await self._wait_for_cleanup(evicted)
            except Exception as e:  # noqa: BLE001 - a bug in one pass must not end eviction for good
                log.error("Eviction manager: pass failed", exc_info=e)
            await asyncio.sleep(self.period)

    async def _observe(self) -> tuple[dict[str, signals.Observation], dict[str, signals.PodUsage]] | None:
        try:
            summary = await self.summary()
        except Exception as e:  # noqa: BLE001 - the runtime or the host may not answer this time
            log.error("Eviction manager: failed to get summary stats", err=str(e))
            return None
        return signals.observe(summary), signals.pod_usage(summary)

    async def synchronize(self) -> Pod | None:
        """One pass; the pod it evicted, if any."""
        observed = await self._observe()
        if observed is None:
            return None
        observations, usage = observed
        decision = policy.decide(self.thresholds, observations, self.state, self.clock(), self.transition_period)
        self.state = decision.state
        if decision.conditions != self.conditions:
            log.info("Eviction manager: node conditions", conditions=",".join(decision.conditions) or "none")
            self.conditions = decision.conditions
            self.on_change()
        if not decision.actionable:
            return None
        threshold = decision.actionable[0]
        resource = policy.SIGNAL_RESOURCE[threshold.signal]
        log.info("Eviction manager: attempting to reclaim", resourceName=resource)
        self.recorder.record(node_ref(self.node_name), WARNING, "EvictionThresholdMet",
                             f"Attempting to reclaim {resource}")
        if threshold.signal in policy.DISK_SIGNALS and await self._reclaims_images(threshold.signal) \
                and await self._reclaim_node_level():
            log.info("Eviction manager: able to reduce resource pressure without evicting pods.",
                     resourceName=resource)
            return None
        return self._evict_one(threshold, resource, decision.actionable, observations, usage)

    async def _reclaims_images(self, signal: str) -> bool:
        if self._dedicated is None:
            self._dedicated = await asyncio.to_thread(self.dedicated_image_fs)
        return policy.reclaims_images(signal, self._dedicated)

    async def _reclaim_node_level(self) -> bool:
        """Unused images first; True when that relieved every threshold (with its minimum reclaim).
        Dead containers need no pass of their own: each pod's worker removes them as it syncs."""
        if self.reclaim_disk is None:
            return False
        try:
            await self.reclaim_disk()
        except Exception as e:  # noqa: BLE001 - a failed reclaim still leaves evicting a pod
            log.info("Eviction manager: unexpected error when attempting to reduce resource pressure", err=str(e))
        observed = await self._observe()
        return observed is not None and not policy.thresholds_met(self.thresholds, observed[0], with_min_reclaim=True)

    def _evict_one(self, threshold: Threshold, resource: str, actionable: Sequence[Threshold],
                   observations: dict[str, signals.Observation], usage: dict[str, signals.PodUsage]) -> Pod | None:
        active = self.pods.active_pods()
        if not active:
            log.error("Eviction manager: eviction thresholds have been met, but no pods are active to evict")
            return None
        ranked = policy.rank(active, usage, resource)
        log.info("Eviction manager: pods ranked for eviction", pods=",".join(p.full_name for p in ranked))
        for pod in ranked:
            if is_critical(pod):  # static, mirror, system priority
                log.error("Eviction manager: cannot evict a critical pod", pod=pod.full_name)
                continue
            message = policy.eviction_message(resource, pod, usage.get(pod.uid), actionable, observations)
            grace = policy.grace_override(threshold, pod, self.max_pod_grace_seconds)
            if self.pods.evict(pod.uid, policy.REASON, message, grace):
                self.recorder.record(pod_ref(pod.namespace, pod.name, pod.uid), WARNING, policy.REASON, message)
                log.info("Eviction manager: evicting pod", pod=pod.full_name, message=message, grace=grace)
                return pod
        log.info("Eviction manager: unable to evict any pods from the node")
        return None

    async def _wait_for_cleanup(self, pod: Pod) -> None:
        deadline = self.clock() + CLEANUP_TIMEOUT
        while not self.pods.eviction_done(pod.uid):
            if self.clock() >= deadline:
                log.info("Eviction manager: timed out waiting for pods to be cleaned up", pod=pod.full_name)
                return
            await asyncio.sleep(CLEANUP_POLL)
        log.info("Eviction manager: pods successfully cleaned up", pod=pod.full_name)
