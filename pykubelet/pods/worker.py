"""One asyncio task per pod UID: the only writer of that pod's runtime state.

Updates collapse: the worker keeps only the latest spec (or the order to terminate) and syncs
when woken — by a new spec, a runtime event for the pod, a probe result, a back-off ending, or
the resync period. It reads the runtime only from the runtime cache, at least as new as its own
last change (pleg/cache.py).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Callable

from pykubelet.api.pod import Pod
from pykubelet.api.pod_status import PodStatus
from pykubelet.cri import errors
from pykubelet.kube import errors as kube_errors
from pykubelet.kube.events import NORMAL, EventRecorder, pod_ref
from pykubelet.pleg.cache import RuntimeCache
from pykubelet.pods.history import PodHistory
from pykubelet.pods.mirror import MirrorPods
from pykubelet.pods.podstatus import pod_status
from pykubelet.pods.sync import PodSyncer
from pykubelet.pods.wakeups import Wakeups
from pykubelet.probes.manager import ProbeManager
from pykubelet.runtime.state import PodRuntimeState
from pykubelet.status.manager import StatusManager
from pykubelet.util import metrics
from pykubelet.util.log import get_logger

log = get_logger(__name__)

ERROR_RETRY_MIN, ERROR_RETRY_MAX = 1.0, 30.0
DEADLINE_EXCEEDED = "DeadlineExceeded"
DEADLINE_MESSAGE = "Pod was active on the node longer than the specified deadline"


@dataclass(frozen=True)
class WorkerDeps:
    """What every pod worker works with; complete and frozen when built."""

    cache: RuntimeCache
    syncer: PodSyncer
    statuses: StatusManager
    recorder: EventRecorder
    probes: ProbeManager
    wakeups: Wakeups
    host_ip: str
    resync_seconds: float
    mirrors: MirrorPods | None = None
    """None on a standalone node (no apiserver to mirror static pods to)."""
    clock: Callable[[], float] = field(default=time.time)
    """Wall clock (seconds since the epoch): status times, back-off against CRI timestamps."""

    @property
    def history(self) -> PodHistory:
        """The pods' step history (pods/history.py): the syncer's, one for the whole pod path."""
        return self.syncer.history


class PodWorker:
    def __init__(self, uid: str, pod: Pod | None, deps: WorkerDeps, on_done: Callable[[str], None]):
        self.uid = uid
        self.pod = pod
        self.deps = deps
        self.on_done = on_done
        self.terminating = pod is None
        self.terminate_grace: int | None = None
        self.seen_at = deps.clock()  # kubelet_pod_start_duration_seconds counts from here
        self.start_time = 0.0  # status.startTime unless a previous status says otherwise (first sync)
        self.syncs = 0
        self._waiting: dict[str, tuple[str, str]] = {}  # waiting reasons from the last sync
        self.evicted: tuple[str, str] | None = None  # (reason, message): Failed for good, its containers killed
        self._fresh_after = 0  # the runtime cache's mark of this worker's last change
        self._wake = asyncio.Event()
        self._wake.set()
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.deps.wakeups.register(self.uid, self.wake)
        self.task = asyncio.create_task(self._run(), name=f"pod-worker-{self.uid[:8]}")

    def update(self, pod: Pod) -> None:
        self.pod = pod
        self._wake.set()

    def terminate(self, grace: int | None = None, pod: Pod | None = None) -> None:
        """Stop the pod for good; `pod`: its latest spec (a deleted pod's carries the deletion)."""
        if pod is not None:
            self.pod = pod
        self.terminating = True
        self.terminate_grace = grace
        self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    @property
    def name(self) -> str:
        return self.pod.full_name if self.pod else self.uid

    async def _run(self) -> None:
        delay = self.deps.resync_seconds
        error_delay = ERROR_RETRY_MIN
        try:
            while True:
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout=delay)
                except asyncio.TimeoutError:
                    pass
                self._wake.clear()
                try:
                    if self.terminating:
                        await self._terminate()
                        return
                    with metrics.POD_WORKER_DURATION.labels("sync").time():
                        delay = await self._sync()
                    error_delay = ERROR_RETRY_MIN
                except (errors.CRIError, OSError) as e:  # the runtime, or the node's disk (full, say)
                    log.error("Pod sync failed; will retry", pod=self.name, err=str(e), retryIn=error_delay)
                    delay, error_delay = error_delay, min(error_delay * 2, ERROR_RETRY_MAX)
        except asyncio.CancelledError:
            raise  # the agent is stopping: leave the pod running
        except Exception as e:  # a bug: surface it, and keep the agent up
            log.error("Pod worker crashed", exc_info=e, pod=self.name)
        finally:
            self.deps.wakeups.unregister(self.uid, self.wake)
            self.on_done(self.uid)

    async def _state(self) -> PodRuntimeState:
        """The pod's runtime state, at least as new as this worker's last change to it."""
        state = await self.deps.cache.newer_than(self.uid, self._fresh_after)
        self.deps.history.observe(state)  # exits and dead sandboxes become steps of its history
        return state

    def _changed_runtime(self) -> None:
        self._fresh_after = self.deps.cache.mark()

    def _status(self, pod: Pod, state: PodRuntimeState, waiting: dict[str, tuple[str, str]],
                terminal: bool = False) -> PodStatus:
        deps = self.deps
        adopted = self.syncs == 0 and bool(state.sandboxes or state.containers)
        # A pod the runtime held before this worker (an agent restart): its transitions happened
        # before we looked, so their times come from the runtime (pods/podstatus.py).
        return pod_status(pod, state, waiting, deps.host_ip, self.start_time,
                          readiness=deps.probes.update_pod_status,
                          now=None if adopted else deps.clock(), terminal=terminal, evicted=self.evicted)

    async def _evict_past_deadline(self, pod: Pod, state: PodRuntimeState) -> float | None:
        """spec.activeDeadlineSeconds, counted from the pod's start time: once it has run out the
        pod is Failed (DeadlineExceeded) and its containers are killed, for good (the kubelet's
        active deadline handler). Returns the seconds left, None without a deadline."""
        deadline = pod.active_deadline_seconds
        if deadline is None or self.evicted is not None:
            return None
        left = self.start_time + deadline - self.deps.clock()
        if left > 0:
            return left
        self.evicted = (DEADLINE_EXCEEDED, DEADLINE_MESSAGE)
        log.info("Pod was active longer than its activeDeadlineSeconds; killing it", pod=pod.full_name,
                 activeDeadlineSeconds=deadline)
        self.deps.recorder.record(pod_ref(pod.namespace, pod.name, pod.uid), NORMAL, *self.evicted)
        self.deps.probes.stop_restart_probes(self.uid)
        await self._report_while(asyncio.ensure_future(
            self.deps.syncer.kill(pod, state, pod.termination_grace_period_seconds)), pod)
        self._changed_runtime()
        return None

    async def _sync(self) -> float:
        pod, deps = self.pod, self.deps
        assert pod is not None
        state = await self._state()
        if not self.start_time:
            self.start_time = state.first_seen() or self.seen_at
        deadline_in = await self._evict_past_deadline(pod, state)
        if self.evicted is not None:  # Failed for good: nothing runs again, the status stays
            state = await self._state()
            deps.statuses.set(pod, self._status(pod, state, {}))
            self._track_probes(pod, state)
            return deps.resync_seconds
        # Report what just happened (an exit, say) before acting on it: stopping a finished
        # pod's sandbox or restarting a container takes long enough for a user to notice.
        deps.statuses.set(pod, self._status(pod, state, self._waiting))
        self.syncs += 1
        probes = deps.probes
        result = await deps.syncer.sync(pod, state, probes.unhealthy(self.uid), probes.kill_graces(self.uid),
                                        probes.unstarted(self.uid))
        self._waiting = result.waiting
        if result.changed:
            self._changed_runtime()
            state = await self._state()
        self._track_probes(pod, state)
        status = self._status(pod, state, result.waiting)
        deps.statuses.set(pod, status)
        metrics.observe_pod_running(pod.uid, self.seen_at, status.phase)
        if await deps.syncer.prune(state):
            self._changed_runtime()
        if pod.is_static and deps.mirrors is not None:
            try:
                if await deps.mirrors.ensure(pod):
                    deps.statuses.resend(pod.uid)
            except kube_errors.KubeError as e:
                log.warning("Could not create the mirror pod; will retry", pod=pod.full_name, err=str(e))
                result.retry_after(ERROR_RETRY_MAX)
        if deadline_in is not None:
            result.retry_after(deadline_in)
        resync = deps.resync_seconds
        return min(result.retry_in, resync) if result.retry_in is not None else resync

    def _track_probes(self, pod: Pod, state: PodRuntimeState) -> None:
        """Probe every running container of the current sandbox; stop probing the rest."""
        probes = self.deps.probes
        sandbox = state.sandbox
        containers = {c.name: c for c in (*pod.init_containers, *pod.containers)}
        running = {c.id: c for c in state.running()
                   if sandbox and c.sandbox_id == sandbox.id and c.name in containers}
        probes.retain(self.uid, set(running))
        pod_ip = state.pod_ip(pod.host_network, self.deps.host_ip)
        for c in running.values():
            probes.track(pod, containers[c.name], c.id, pod_ip, c.started_at)

    async def _report_while(self, stopping: asyncio.Future[None], pod: Pod) -> None:
        """Wait for `stopping`; meanwhile, on each wake-up (a probe result, a container's exit),
        report the pod's status as the runtime cache has it."""
        woken: asyncio.Future[bool] | None = None
        try:
            while True:
                woken = asyncio.ensure_future(self._wake.wait())
                await asyncio.wait({stopping, woken}, return_when=asyncio.FIRST_COMPLETED)
                if stopping.done():
                    return stopping.result()
                self._wake.clear()
                state = await self.deps.cache.newer_than(self.uid, 0)
                self.deps.statuses.set(pod, self._status(pod, state, {}))
        finally:  # done, or the agent stops (cancelled): leave nothing running
            for future in (stopping, woken):
                if future is not None and not future.done():
                    future.cancel()

    async def _terminate(self) -> None:
        deps = self.deps
        state = await self._state()
        pod = self.pod
        grace = self.terminate_grace
        if grace is None:
            grace = pod.termination_grace_period_seconds if pod else state.grace_seconds()
        deps.probes.stop_restart_probes(self.uid)
        deleted = pod is not None and bool(pod.deletion_timestamp)
        if deleted:
            # As the kubelet does, the pod's status follows its containers while they stop (a
            # readiness probe that fails marks it not ready), and how they ended (with a terminal
            # phase) is reported before the pod may go: the status manager writes it before its
            # final DELETE, and a pod that finalizers keep shows it.
            await self._report_while(asyncio.ensure_future(deps.syncer.kill(pod, state, grace)), pod)
            self._changed_runtime()
            state = await self._state()
            if not self.start_time:
                self.start_time = state.first_seen() or self.seen_at
            deps.statuses.set(pod, self._status(pod, state, {}, terminal=True))
        await deps.syncer.terminate(pod, state, grace)
        self._changed_runtime()
        if pod is not None and pod.is_static and deps.mirrors is not None:
            try:
                await deps.mirrors.remove(pod)
            except kube_errors.KubeError as e:
                log.warning("Could not delete the mirror pod", pod=pod.full_name, err=str(e))
        deps.probes.retain(self.uid, set())
        if not deleted:
            deps.statuses.remove(self.uid)  # a deleted pod's final status goes with finish_deletion
