"""One asyncio task per pod UID: the only writer of that pod's runtime state.

Updates collapse: the worker keeps only the latest spec (or the order to terminate) and syncs
when woken — by a new spec, a runtime event for the pod, a back-off ending, or the resync period.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable

from pykubelet.api.pod import Pod
from pykubelet.cri import errors
from pykubelet.cri.client import CRIClient
from pykubelet.pods.podstatus import pod_status
from pykubelet.pods.sync import PodSyncer
from pykubelet.runtime.specs import pod_log_directory
from pykubelet.runtime.state import read_pod_state
from pykubelet.status.manager import StatusManager
from pykubelet.util.log import get_logger

log = get_logger(__name__)

ERROR_RETRY_MIN, ERROR_RETRY_MAX = 1.0, 30.0


class PodWorker:
    def __init__(self, uid: str, pod: Pod | None, cri: CRIClient, syncer: PodSyncer, statuses: StatusManager,
                 host_ip: Callable[[], str], resync_seconds: float, on_done: Callable[[str], None]):
        self.uid = uid
        self.pod = pod
        self.cri = cri
        self.syncer = syncer
        self.statuses = statuses
        self.host_ip = host_ip
        self.resync_seconds = resync_seconds
        self.on_done = on_done
        self.terminating = pod is None
        self.terminate_grace: int | None = None
        self.start_time = time.time()
        self.synced = asyncio.Event()  # set after the first sync (for tests and adoption)
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
        delay = self.resync_seconds
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
        pod = self.pod
        assert pod is not None
        state = await read_pod_state(self.cri, self.uid)
        result = await self.syncer.sync(pod, state)
        if result.changed:
            state = await read_pod_state(self.cri, self.uid)
        self.statuses.set(pod, pod_status(pod, state, result.waiting, self.host_ip(), self.start_time))
        await self.syncer.prune(state)
        self.synced.set()
        return min(result.retry_in, self.resync_seconds) if result.retry_in is not None else self.resync_seconds

    async def _terminate(self) -> None:
        state = await read_pod_state(self.cri, self.uid)
        pod = self.pod
        grace = self.terminate_grace
        if grace is None:
            grace = pod.termination_grace_period_seconds if pod else state.grace_seconds()
        name = pod.full_name if pod else f"{state.namespace}/{state.name}"
        log_dir = None
        if state.name:
            log_dir = f"{self.syncer.logs_root}/{state.namespace}_{state.name}_{self.uid}"
        elif pod:
            log_dir = pod_log_directory(self.syncer.logs_root, pod)
        await self.syncer.terminate(name, self.uid, state, grace, log_dir)
        self.statuses.remove(self.uid)
