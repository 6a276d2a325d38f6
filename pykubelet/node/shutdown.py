"""Graceful node shutdown, the kubelet's way: a "delay" inhibitor lock from systemd-logind holds
the machine's shutdown back while the pods stop.

At start: raise logind's InhibitDelayMaxSec when it is below the total budget (a drop-in, then a
reload), take the lock, watch PrepareForShutdown. On PrepareForShutdown(true): the node goes
NotReady ("node is shutting down") and turns new pods away; the pods are killed group by group,
lowest priority first, each with its group's budget (or its own grace period if shorter) and a
Failed status saying why, each group waited for at most its budget; then, for what is left of
the whole budget, until those Failed statuses are in the apiserver; then the lock is released and
logind goes on. When the shutdown began and ended is kept in the root directory's
`graceful_node_shutdown_state` (node/shutdown_state.py), read at the next start for the metrics.
On PrepareForShutdown(false), a cancelled shutdown: the lock is taken again and the node is Ready
again. Without logind (no systemd, no system bus) the node runs without graceful shutdown, said
once in the log.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Callable

from pykubelet.api.pod import Pod
from pykubelet.config.node_lifecycle import PriorityGracePeriod
from pykubelet.kube.events import NORMAL, EventRecorder, node_ref
from pykubelet.node import shutdown_plan as plan, shutdown_state
from pykubelet.node.logind import Logind, LogindError
from pykubelet.node.shutdown_state import ShutdownRecord, ShutdownStateError
from pykubelet.util.log import get_logger
from pykubelet.util.metrics import GRACEFUL_SHUTDOWN_END, GRACEFUL_SHUTDOWN_START

log = get_logger(__name__)

RECONNECT_SECONDS = 1.0  # the kubelet's dbusReconnectPeriod
RELOAD_TRIES, RELOAD_FIRST_WAIT = 5, 0.1  # polling logind after the reload, doubling
POLL_SECONDS = 0.2  # how often a group's pods are checked for being killed
RETRY_REPORTS_SECONDS = 1.0  # how often failed status writes are retried while the lock waits for them


@dataclass(frozen=True)
class PodKiller:
    """What the manager asks of the pod path (pods/dispatcher.py has them)."""

    active_pods: Callable[[], list[Pod]]
    kill: Callable[[str, str, str, int], bool]
    """(uid, reason, message, grace seconds): fail the pod for good and kill it; False if it is gone."""
    killed: Callable[[str], bool]
    reported: Callable[[str], bool] = lambda uid: True
    """The pod's final status is in the apiserver (always, without one)."""
    retry_reports: Callable[[], None] = lambda: None
    """Retry the status writes that failed now, not at the next resync."""


def _show(record: ShutdownRecord) -> None:
    """The record in the metrics, whole seconds, 0 for a time not on record. (The kubelet's end of
    a shutdown sets the start gauge to the end time; the end gauge is the one meant, and its own
    restart agrees.)"""
    GRACEFUL_SHUTDOWN_START.set(int(record.start or 0))
    GRACEFUL_SHUTDOWN_END.set(int(record.end or 0))


class NodeShutdownManager:
    def __init__(self, periods: list[PriorityGracePeriod], logind: Logind, pods: PodKiller,
                 recorder: EventRecorder, node_name: str, on_change: Callable[[], None] = lambda: None,
                 clock: Callable[[], float] = time.monotonic, poll: float = POLL_SECONDS,
                 state_file: str | None = None, wall_clock: Callable[[], float] = time.time):
        self.periods = periods
        self.logind = logind
        self.pods = pods
        self.recorder = recorder
        self.node_name = node_name
        self.on_change = on_change  # the node's Ready condition changed: report it now
        self.clock = clock
        self.poll = poll
        self.state_file = state_file  # None: no record kept (tests of the rest)
        self.wall_clock = wall_clock
        self.shutting_down = False
        self._lock: int | None = None
        self._watched = False  # a lock was taken once: logind is there
        self._reported_last = False

    def errors(self) -> list[str]:
        """What the node's Ready condition reports of it."""
        return [plan.SHUTTING_DOWN] if self.shutting_down else []

    async def run(self) -> None:
        """Watch for shutdown until cancelled. Without logind, say so once and stop watching; a
        bus that went away after it worked is reconnected to, as the kubelet does."""
        while True:
            try:
                await self._watch()
                raise LogindError("the system bus closed the connection")
            except Exception as e:  # noqa: BLE001 - no bus, or a bug: never the agent's end
                self._release()
                if not self._watched:
                    log.warning("Graceful node shutdown is off: cannot use systemd-logind", err=str(e))
                    return
                log.error("Unable to watch the node for shutdown events; retrying", err=str(e))
            await asyncio.sleep(RECONNECT_SECONDS)

    async def _watch(self) -> None:
        requested = plan.period_requested(self.periods)
        current = await self.logind.inhibit_delay()
        if requested > current:
            await self._raise_inhibit_delay(requested)
        await self._acquire()
        if not self._reported_last:  # once the watch works, as the kubelet sets them after its start
            self._reported_last = True
            await self._report_last_shutdown()
        log.info("Watching the node for shutdown", budget_seconds=requested,
                 groups=",".join(f"{p.priority}:{p.seconds}s" for p in self.periods))
        async for shutting_down in self.logind.shutdown_signals():
            await self.handle(shutting_down)

    async def _raise_inhibit_delay(self, requested: int) -> None:
        await self.logind.override_inhibit_delay(requested)
        await self.logind.reload()
        wait, current = RELOAD_FIRST_WAIT, 0.0
        for _ in range(RELOAD_TRIES):
            await asyncio.sleep(wait)  # logind reloads after it answered
            current = await self.logind.inhibit_delay()
            if current >= requested:
                log.info("Raised logind's InhibitDelayMaxSec for graceful node shutdown", seconds=requested)
                return
            wait *= 2
        raise LogindError(f"node shutdown manager was timed out after {RELOAD_TRIES} attempts waiting for logind "
                          f"InhibitDelayMaxSec to update to {requested}s (ShutdownGracePeriod), current value is "
                          f"{current:g}s")

    async def _acquire(self) -> None:
        lock = await self.logind.inhibit()
        self._release()
        self._lock, self._watched = lock, True

    def _release(self) -> None:
        if self._lock is not None:
            self.logind.release(self._lock)
            self._lock = None

    async def handle(self, shutting_down: bool) -> None:
        """One PrepareForShutdown signal."""
        log.info("Shutdown manager detected new shutdown event", event="shutdown" if shutting_down else "cancelled")
        self.recorder.record(node_ref(self.node_name), NORMAL, "NodeShutdown",
                             "Shutdown manager detected shutdown event" if shutting_down else
                             "Shutdown manager detected shutdown cancellation")
        self.shutting_down = shutting_down
        self.on_change()
        if not shutting_down:
            await self._acquire()
            return
        deadline = self.clock() + plan.period_requested(self.periods)
        began = self.wall_clock()
        try:
            await self._record(ShutdownRecord(start=began))
            killed = await self.kill_pods(self.pods.active_pods())
            await self._wait_reported(killed, deadline)
        finally:
            try:
                await self._record(ShutdownRecord(start=began, end=self.wall_clock()))
            finally:
                self._release()
                log.info("Shutdown manager completed processing shutdown event, node will shutdown shortly")

    async def _record(self, record: ShutdownRecord) -> None:
        """The metrics, and the file for the next start."""
        _show(record)
        if self.state_file is None:
            return
        try:
            await asyncio.to_thread(shutdown_state.store, self.state_file, record)
        except OSError as e:  # a full or read-only disk: the shutdown goes on without its record
            log.error("Failed to store graceful shutdown state", file=self.state_file, err=str(e))

    async def _report_last_shutdown(self) -> None:
        if self.state_file is None:
            return
        try:
            record = await asyncio.to_thread(shutdown_state.load, self.state_file)
        except (OSError, ShutdownStateError) as e:
            log.error("Failed to load graceful shutdown state", file=self.state_file, err=str(e))
            return
        _show(record)

    async def kill_pods(self, pods: list[Pod]) -> list[Pod]:
        """Kill `pods` group by group; the pods a kill was started for."""
        killed: list[Pod] = []
        for group in plan.group_pods(self.periods, pods):
            if group.pods:
                killed += await self._kill_group(group)
        return killed

    async def _wait_reported(self, pods: list[Pod], deadline: float) -> None:
        """Wait, until the budget's end, for the killed pods' Failed statuses to be in the apiserver.
        The kubelet releases the lock as soon as the pods are killed, and a status still on its way
        (a slow or throttled apiserver) goes down with the machine: the pod shows Running on a node
        that is gone until the node lifecycle controller evicts it, minutes later. Waiting costs
        the shutdown nothing it was not willing to give."""
        retry_at = self.clock()
        while left := [pod for pod in pods if not self.pods.reported(pod.uid)]:
            if self.clock() >= deadline:
                log.info("Shutdown manager stopped waiting for pod statuses to reach the apiserver",
                         pods=",".join(p.full_name for p in left))
                return
            if self.clock() >= retry_at:
                self.pods.retry_reports()
                retry_at = self.clock() + RETRY_REPORTS_SECONDS
            await asyncio.sleep(min(self.poll, max(deadline - self.clock(), 0)))
        if pods:
            log.info("Shutdown manager: the killed pods' statuses are in the apiserver", pods=len(pods))

    async def _kill_group(self, group: plan.ShutdownGroup) -> list[Pod]:
        budget = group.period.seconds
        deadline = self.clock() + budget
        killing: list[Pod] = []
        for pod in group.pods:
            grace = plan.pod_grace(pod, budget)
            log.info("Shutdown manager killing pod with gracePeriod", pod=pod.full_name, gracePeriod=grace,
                     priority=group.period.priority)
            if self.pods.kill(pod.uid, plan.SHUTDOWN_REASON, plan.SHUTDOWN_MESSAGE, grace):
                killing.append(pod)
        started = list(killing)
        while True:
            left = [pod for pod in killing if not self.pods.killed(pod.uid)]
            for pod in killing:
                if pod not in left:
                    log.info("Shutdown manager finished killing pod", pod=pod.full_name)
            killing = left
            if not killing:
                log.info("Done waiting for all pods in group to terminate", gracePeriod=budget,
                         priority=group.period.priority)
                return started
            if self.clock() >= deadline:
                log.info("Shutdown manager pod killing time out", gracePeriod=budget, priority=group.period.priority,
                         pods=",".join(p.full_name for p in killing))
                return started
            await asyncio.sleep(min(self.poll, max(deadline - self.clock(), 0)))
