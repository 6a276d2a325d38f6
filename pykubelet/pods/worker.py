"""One asyncio task per pod UID: the only writer of that pod's runtime state.

Updates collapse: the worker keeps only the latest spec (or the order to terminate) and syncs
when woken — by a new spec, a runtime event for the pod, a back-off ending, or the resync period.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Callable

from pykubelet.api.pod import Pod
from pykubelet.cri import errors
from pykubelet.cri.client import CRIClient
from pykubelet.kube import errors as kube_errors
from pykubelet.kube.events import EventRecorder, pod_ref
from pykubelet.pods.mirror import MirrorPods
from pykubelet.pods.podstatus import ProbeView, pod_status
from pykubelet.probes.manager import ProbeManager
from pykubelet.pods.sync import PodSyncer
from pykubelet.runtime.specs import pod_log_directory
from pykubelet.runtime.state import read_pod_state
from pykubelet.status.manager import StatusManager
from pykubelet.util import metrics
from pykubelet.util.log import get_logger

log = get_logger(__name__)

ERROR_RETRY_MIN, ERROR_RETRY_MAX = 1.0, 30.0


@dataclass
class WorkerDeps:
    """What every pod worker works with."""

    cri: CRIClient
    syncer: PodSyncer
    statuses: StatusManager
    recorder: EventRecorder
    host_ip: Callable[[], str]
    resync_seconds: float
    mirrors: MirrorPods | None = None
    probes: ProbeManager | None = None

    @staticmethod
    def ref(pod: Pod, container: str | None = None) -> dict[str, str]:
        return pod_ref(pod.namespace, pod.name, pod.uid, container)


class PodWorker:
    def __init__(self, uid: str, pod: Pod | None, deps: WorkerDeps, on_done: Callable[[str], None]):
        self.uid = uid
        self.pod = pod
        self.deps = deps
        self.on_done = on_done
        self.terminating = pod is None
        self.terminate_grace: int | None = None
        self.start_time = time.time()
        self._waiting: dict[str, tuple[str, str]] = {}  # waiting reasons from the last sync
        self._wake = asyncio.Event()
        self._wake.set()
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name=f"pod-worker-{self.uid[:8]}")

    def update(self, pod: Pod) -> None:
        self.pod = pod
        self._wake.set()

    def terminate(self, grace: int | None = None) -> None:
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
                except errors.CRIError as e:
                    log.error("Pod sync failed; will retry", pod=self.name, err=str(e), retryIn=error_delay)
                    delay, error_delay = error_delay, min(error_delay * 2, ERROR_RETRY_MAX)
        except asyncio.CancelledError:
            raise  # the agent is stopping: leave the pod running
        except Exception as e:  # a bug: surface it, and keep the agent up
            log.error("Pod worker crashed", exc_info=e, pod=self.name)
        finally:
            self.on_done(self.uid)

    async def _sync(self) -> float:
        pod, deps = self.pod, self.deps
        assert pod is not None
        state = await read_pod_state(deps.cri, self.uid)
        view = self._probe_view()
        # Report what just happened (an exit, say) before acting on it: stopping a finished
        # pod's sandbox or restarting a container takes long enough for a user to notice.
        deps.statuses.set(pod, pod_status(pod, state, self._waiting, deps.host_ip(), self.start_time, view))
        unhealthy = deps.probes.unhealthy(self.uid) if deps.probes else {}
        result = await deps.syncer.sync(pod, state, unhealthy)
        self._waiting = result.waiting
        if result.changed:
            state = await read_pod_state(deps.cri, self.uid)
        self._track_probes(pod, state)
        deps.statuses.set(pod, pod_status(pod, state, result.waiting, deps.host_ip(), self.start_time, view))
        metrics.observe_pod_running(pod.uid, self.start_time, (deps.statuses.get(pod.uid) or {}).get("phase", ""))
        await deps.syncer.prune(state)
        if pod.is_static and deps.mirrors is not None:
            try:
                if await deps.mirrors.ensure(pod):
                    deps.statuses.resend(pod.uid)
            except kube_errors.KubeError as e:
                log.warning("Could not create the mirror pod; will retry", pod=pod.full_name, err=str(e))
                result.retry_after(ERROR_RETRY_MAX)
        resync = deps.resync_seconds
        return min(result.retry_in, resync) if result.retry_in is not None else resync

    def _probe_view(self) -> ProbeView:
        probes = self.deps.probes
        if probes is None:
            return lambda _: (True, True)

        def view(container_id: str) -> tuple[bool, bool]:
            result = probes.results(self.uid, container_id)
            return result.started, result.ready
        return view

    def _track_probes(self, pod: Pod, state) -> None:
        """Probe every running container of the current sandbox; stop probing the rest."""
        probes = self.deps.probes
        if probes is None:
            return
        sandbox = state.sandboxes[0] if state.sandboxes else None
        specs = {c.name: c.raw for c in (*pod.init_containers, *pod.containers)}
        running = {c.id: c for c in state.running() if sandbox and c.sandbox_id == sandbox.id and c.name in specs}
        probes.retain(self.uid, set(running))
        pod_ip = self.deps.host_ip() if pod.host_network else sandbox.ip if sandbox else ""
        for c in running.values():
            probes.track(pod, specs[c.name], c.id, pod_ip, c.started_at)

    async def _terminate(self) -> None:
        deps = self.deps
        state = await read_pod_state(deps.cri, self.uid)
        pod = self.pod
        grace = self.terminate_grace
        if grace is None:
            grace = pod.termination_grace_period_seconds if pod else state.grace_seconds()
        name = pod.full_name if pod else f"{state.namespace}/{state.name}"
        log_dir = None
        if state.name:
            log_dir = f"{deps.syncer.logs_root}/{state.namespace}_{state.name}_{self.uid}"
        elif pod:
            log_dir = pod_log_directory(deps.syncer.logs_root, pod)
        await deps.syncer.terminate(name, self.uid, state, grace, log_dir, pod)
        if pod is not None and pod.is_static and deps.mirrors is not None:
            try:
                await deps.mirrors.remove(pod)
            except kube_errors.KubeError as e:
                log.warning("Could not delete the mirror pod", pod=pod.full_name, err=str(e))
        if deps.probes is not None:
            deps.probes.retain(self.uid, set())
        deps.statuses.remove(self.uid)
