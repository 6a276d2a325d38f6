"""One asyncio task per pod UID: the only writer of that pod's runtime state.

It works the pod's record (pods/record.py), which the dispatcher fills: the latest spec, or the
order to terminate. Updates collapse: the worker acts on what the record holds when woken — by a
new spec, a runtime event for the pod, a probe result, a back-off ending, or the resync period.
It reads the runtime only from the runtime cache, at least as new as its own last change
(pleg/cache.py).
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
from pykubelet.kube.events import NORMAL, WARNING, EventRecorder, pod_ref
from pykubelet.pleg.cache import RuntimeCache
from pykubelet.pods import resize
from pykubelet.pods.history import PodHistory
from pykubelet.pods.mirror import MirrorPods
from pykubelet.pods.podstatus import pod_status
from pykubelet.pods.record import Phase, PodRecord
from pykubelet.pods.sync import PodSyncer
from pykubelet.pods.wakeups import Wakeups
from pykubelet.probes.manager import ProbeManager
from pykubelet.runtime.state import PodRuntimeState
from pykubelet.status.manager import StatusManager
from pykubelet.util import metrics
from pykubelet.util.log import get_logger
from pykubelet.util.timeouts import within

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
    """Works one pod's record: `sync` while it should run, then `sync_terminating` (stop its
    containers) and `sync_terminated` (remove what is left), as the kubelet's pod workers do."""

    def __init__(self, record: PodRecord, deps: WorkerDeps, on_done: Callable[[PodRecord], None]):
        self.record = record
        self.uid = record.uid
        self.deps = deps
        self.on_done = on_done
        self._fresh_after = 0  # the runtime cache's mark of this worker's last change
        self._wake = asyncio.Event()
        self._wake.set()

    def start(self) -> None:
        self.deps.wakeups.register(self.uid, self.wake)
        self.record.task = asyncio.create_task(self._run(), name=f"pod-worker-{self.uid[:8]}")

    def wake(self) -> None:
        self._wake.set()

    async def _run(self) -> None:
        record = self.record
        delay = self.deps.resync_seconds
        error_delay = ERROR_RETRY_MIN
        try:
            while True:
                try:
                    await within(self._wake.wait(), timeout=delay)
                except asyncio.TimeoutError:
                    pass
                self._wake.clear()
                try:  # a step that fails is retried alone: a pod once stopped is not stopped again
                    if record.phase is Phase.TERMINATING:
                        await self.sync_terminating()
                        record.move(Phase.TERMINATED, "its containers stopped")
                    if record.phase is not Phase.SYNCING:
                        return await self.sync_terminated()
                    with metrics.POD_WORKER_DURATION.labels("sync").time():
                        delay = await self.sync()
                    error_delay = ERROR_RETRY_MIN
                except (errors.CRIError, OSError) as e:  # the runtime, or the node's disk (full, say)
                    log.error("Pod sync failed; will retry", pod=record.name, err=str(e), retryIn=error_delay)
                    delay, error_delay = error_delay, min(error_delay * 2, ERROR_RETRY_MAX)
        except asyncio.CancelledError:
            raise  # the agent is stopping: leave the pod running
        except Exception as e:  # a bug: surface it, and keep the agent up
            log.error("Pod worker crashed", exc_info=e, pod=record.name)
        finally:
            self.deps.wakeups.unregister(self.uid, self.wake)
            self.on_done(record)

    async def _state(self) -> PodRuntimeState:
        """The pod's runtime state, at least as new as this worker's last change to it."""
        state = await self.deps.cache.newer_than(self.uid, self._fresh_after)
        self.deps.history.observe(state)  # exits and dead sandboxes become steps of its history
        if not self.record.start_time:  # what the runtime knows of its start (an agent restart), else now
            self.record.start_time = state.first_seen() or self.record.seen_at
        return state

    def _changed_runtime(self, resized: bool = False) -> None:
        """`resized`: containers' resources changed, which the PLEG's listing does not show."""
        cache = self.deps.cache
        self._fresh_after = cache.reinspect(self.uid) if resized else cache.mark()

    def _status(self, pod: Pod, state: PodRuntimeState, waiting: dict[str, tuple[str, str]],
                terminal: bool = False) -> PodStatus:
        deps = self.deps
        adopted = self.record.syncs == 0 and bool(state.sandboxes or state.containers)
        # A pod the runtime held before this worker (an agent restart): its transitions happened
        # before we looked, so their times come from the runtime (pods/podstatus.py).
        status = pod_status(pod, state, waiting, deps.host_ip, self.record.start_time,
                            readiness=deps.probes.update_pod_status,
                            now=None if adopted else deps.clock(), terminal=terminal, evicted=self.record.evicted,
                            disrupted=self.record.disrupted)
        status.conditions += self.deps.syncer.parts.resize_state.pod_conditions(self.uid, deps.clock())
        return status

    async def _allocated(self, pod: Pod) -> Pod:
        """The pod with its allocated resources, a pending resize admitted if it fits now."""
        allocated, events = await self.deps.syncer.parts.resize_state.allocate(pod)
        for kind, reason, message in events:
            self.deps.recorder.record(pod_ref(pod.namespace, pod.name, pod.uid), kind, reason, message)
        return allocated

    def _resize_progress(self, pod: Pod, state: PodRuntimeState, error: str) -> None:
        """PodResizeInProgress: an Error while a resize fails; cleared (ResizeCompleted) once
        every running container runs with its allocated resources."""
        resize_state = self.deps.syncer.parts.resize_state
        generation = pod.generation
        if error:
            resize_state.resize_error(self.uid, error, generation)
            self.deps.recorder.record(pod_ref(pod.namespace, pod.name, pod.uid), WARNING, "ResizeError",
                                      resize.event_message("Pod resize error", pod, generation, error))
        elif resize.compute_resize(pod, state, resize_state.actuated_of(self.uid)).is_noop():
            if resize_state.finished(self.uid):
                self.deps.recorder.record(pod_ref(pod.namespace, pod.name, pod.uid), NORMAL, "ResizeCompleted",
                                          resize.event_message("Pod resize completed", pod, generation))
        else:
            resize_state.in_progress(self.uid, generation)

    async def _evict_past_deadline(self, pod: Pod, state: PodRuntimeState) -> float | None:
        """spec.activeDeadlineSeconds, counted from the pod's start time: once it has run out the
        pod is Failed (DeadlineExceeded) and its containers are killed, for good (the kubelet's
        active deadline handler). Returns the seconds left, None without a deadline."""
        deadline, record = pod.active_deadline_seconds, self.record
        if deadline is None or record.evicted is not None:
            return None
        left = record.start_time + deadline - self.deps.clock()
        if left > 0:
            return left
        record.evicted, record.evict_grace = (DEADLINE_EXCEEDED, DEADLINE_MESSAGE), pod.termination_grace_period_seconds
        log.info("Pod was active longer than its activeDeadlineSeconds; killing it", pod=pod.full_name,
                 activeDeadlineSeconds=deadline)
        self.deps.recorder.record(pod_ref(pod.namespace, pod.name, pod.uid), NORMAL, *record.evicted)
        return None

    async def _kill_evicted(self, pod: Pod, state: PodRuntimeState) -> None:
        """Kill a pod failed for good (record.evicted) within its eviction's grace period, once."""
        grace = self.record.evict_grace
        assert grace is not None
        self.deps.probes.stop_restart_probes(self.uid)
        await self._report_while(asyncio.ensure_future(self.deps.syncer.kill(pod, state, grace)), pod)
        self._changed_runtime()
        self.record.evict_grace = None

    async def sync(self) -> float:
        """Run the pod towards its spec (the kubelet's SyncPod); returns the seconds until the next sync."""
        record, deps = self.record, self.deps
        assert record.pod is not None  # only an orphan has none, and it never syncs
        pod = await self._allocated(record.pod)  # it runs with its allocated resources
        state = await self._state()
        deadline_in = await self._evict_past_deadline(pod, state)
        if record.evict_grace is not None:
            await self._kill_evicted(pod, state)
        if record.evicted is not None:  # Failed for good: nothing runs again, the status stays
            state = await self._state()
            deps.statuses.set(pod, self._status(pod, state, {}))
            self._track_probes(pod, state)
            return deps.resync_seconds
        # Report what just happened (an exit, say) before acting on it: stopping a finished
        # pod's sandbox or restarting a container takes long enough for a user to notice.
        deps.statuses.set(pod, self._status(pod, state, record.waiting))
        record.syncs += 1
        probes = deps.probes
        result = await deps.syncer.sync(pod, state, probes.unhealthy(self.uid), probes.kill_graces(self.uid),
                                        probes.unstarted(self.uid))
        record.waiting = result.waiting
        if result.changed or result.resized:
            self._changed_runtime(resized=result.resized)
            state = await self._state()
        self._resize_progress(pod, state, result.resize_error)
        self._track_probes(pod, state)
        status = self._status(pod, state, result.waiting)
        deps.statuses.set(pod, status)
        metrics.observe_pod_running(pod.uid, record.seen_at, status.phase)
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

    async def sync_terminating(self) -> None:
        """Stop the pod's containers (preStop first) and sandboxes within the grace period, for good
        (the kubelet's SyncTerminatingPod)."""
        record, deps = self.record, self.deps
        state = await self._state()
        pod = record.pod
        deps.probes.stop_restart_probes(self.uid)
        stopping = asyncio.ensure_future(deps.syncer.kill(pod, state, record.termination_grace(state)))
        deleted = pod is not None and bool(pod.deletion_timestamp)
        # As the kubelet does, a deleted pod's status follows its containers while they stop (a
        # readiness probe that fails marks it not ready), and how they ended (with a terminal
        # phase) is reported before the pod may go: the status manager writes it before its
        # final DELETE, and a pod that finalizers keep shows it.
        await (self._report_while(stopping, pod) if deleted else stopping)
        self._changed_runtime()
        if deleted:
            deps.statuses.set(pod, self._status(pod, await self._state(), {}, terminal=True))

    async def sync_terminated(self) -> None:
        """Remove what is left of the pod: its containers, sandboxes, directories and cgroups, its
        mirror pod, its probes and (unless a deletion still has to report it) its status (the
        kubelet's SyncTerminatedPod)."""
        record, deps = self.record, self.deps
        state = await self._state()
        pod = record.pod
        await deps.syncer.terminate(pod, state, record.termination_grace(state))
        self._changed_runtime()
        if pod is not None and pod.is_static and deps.mirrors is not None:
            try:
                await deps.mirrors.remove(pod)
            except kube_errors.KubeError as e:
                log.warning("Could not delete the mirror pod", pod=pod.full_name, err=str(e))
        deps.probes.retain(self.uid, set())
        await deps.syncer.parts.resize_state.remove(self.uid)
        if pod is None or not pod.deletion_timestamp:
            deps.statuses.remove(self.uid)  # a deleted pod's final status goes with its final DELETE
