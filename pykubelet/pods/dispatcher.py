"""The sync loop: hands desired pods, runtime events and housekeeping to per-pod workers.

It only hands work out; it never calls the runtime itself (the kubelet's syncLoop).
"""

from __future__ import annotations

import time
from typing import Callable, Iterable

from pykubelet.api.pod import Pod
from pykubelet.cri.client import CRIClient
from pykubelet.pods.sync import PodSyncer
from pykubelet.pods.worker import PodWorker
from pykubelet.status.manager import StatusManager
from pykubelet.util.log import get_logger

log = get_logger(__name__)


class PodDispatcher:
    def __init__(self, cri: CRIClient, syncer: PodSyncer, statuses: StatusManager,
                 host_ip: Callable[[], str], resync_seconds: float, max_pods: int):
        self.cri = cri
        self.syncer = syncer
        self.statuses = statuses
        self.host_ip = host_ip
        self.resync_seconds = resync_seconds
        self.max_pods = max_pods
        self.rejected: set[str] = set()  # UIDs refused at admission; the kubelet never retries them
        self.desired: dict[str, Pod] = {}
        self.workers: dict[str, PodWorker] = {}
        self._stopping = False
        self._terminated_at: dict[str, float] = {}  # uid -> when its worker finished terminating

    def _start_worker(self, uid: str, pod: Pod | None) -> PodWorker:
        worker = PodWorker(uid, pod, self.cri, self.syncer, self.statuses, self.host_ip,
                           self.resync_seconds, self._worker_done)
        self.workers[uid] = worker
        worker.start()
        return worker

    def set_pods(self, pods: Iterable[Pod]) -> None:
        """The whole desired set from the sources: start, update or terminate workers to match."""
        new = {p.uid: p for p in pods}
        for uid, pod in new.items():
            worker = self.workers.get(uid)
            if uid in self.rejected:
                continue
            if worker is None:
                if not self._admit(pod):
                    continue
                log.info("Pod added", pod=pod.full_name, uid=uid)
                self._start_worker(uid, pod)
            elif not worker.terminating and pod is not self.desired.get(uid):
                worker.update(pod)
        for uid in self.desired.keys() - new.keys():
            worker = self.workers.get(uid)
            pod = self.desired[uid]
            if uid in self.rejected:
                self.rejected.discard(uid)
                self.statuses.remove(uid)
                continue
            log.info("Pod removed; terminating", pod=pod.full_name, uid=uid)
            if worker is not None:
                worker.terminate(pod.termination_grace_period_seconds)
            else:
                self._start_worker(uid, None).terminate(pod.termination_grace_period_seconds)
        self.desired = new

    def _admit(self, pod: Pod) -> bool:
        """The kubelet's pod-count admission: a pod over maxPods is Failed with OutOfpods."""
        used = sum(1 for w in self.workers.values() if not w.terminating)
        if used < self.max_pods:
            return True
        message = (f"Pod was rejected: Node didn't have enough resource: pods, requested: 1, "
                   f"used: {used}, capacity: {self.max_pods}")
        log.warning("Pod rejected at admission", pod=pod.full_name, reason="OutOfpods", message=message)
        self.rejected.add(pod.uid)
        self.statuses.set(pod, {"phase": "Failed", "reason": "OutOfpods", "message": message,
                                "hostIP": self.host_ip(), "containerStatuses": []})
        return False

    def wake(self, uid: str) -> None:
        """A runtime event for a pod: its worker syncs now."""
        worker = self.workers.get(uid)
        if worker is not None:
            worker.wake()

    def housekeeping(self, runtime_uids: Iterable[str], listed_at: float) -> None:
        """Terminate pods the runtime holds that no source wants; restart missing workers.

        Call only once every source has delivered its first set, or a restarted agent would
        kill pods it simply has not read yet. `listed_at` is when runtime_uids was listed: pods
        terminated after that are not orphans, only not yet gone from that listing.
        """
        self._terminated_at = {u: t for u, t in self._terminated_at.items() if t >= listed_at}
        for uid in runtime_uids:
            if uid not in self.desired and uid not in self.workers and uid not in self._terminated_at:
                log.info("Found pod in the runtime that no source wants; terminating", uid=uid)
                self._start_worker(uid, None)
        for uid, pod in self.desired.items():
            if uid not in self.workers and uid not in self.rejected:
                log.warning("Pod had no worker; starting one", pod=pod.full_name)
                self._start_worker(uid, pod)

    def _worker_done(self, uid: str) -> None:
        worker = self.workers.pop(uid, None)
        if self._stopping or worker is None or not worker.terminating:
            return  # stopping, or a crashed worker: housekeeping starts a new one
        self._terminated_at[uid] = time.time()
        pod = self.desired.get(uid)
        if pod is not None:
            # Terminated while a source added it again (same content, same UID): run it anew.
            self._start_worker(uid, pod)

    async def stop(self) -> None:
        """Cancel every worker: the agent stops, the pods keep running."""
        self._stopping = True
        for worker in list(self.workers.values()):
            if worker.task:
                worker.task.cancel()
        for worker in list(self.workers.values()):
            if worker.task:
                try:
                    await worker.task
                except BaseException:
                    pass
