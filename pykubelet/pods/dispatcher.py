"""The sync loop: hands desired pods, runtime events and housekeeping to per-pod workers.

It only hands work out; it never calls the runtime itself (the kubelet's syncLoop). Each source
(static files, the apiserver) delivers its whole set; the union is what the node should run.
"""

from __future__ import annotations

import asyncio
from typing import Iterable

from pykubelet.api.pod import Pod, unsupported_fields
from pykubelet.api.sysctls import SysctlAllowlist
from pykubelet.kube.events import pod_ref
from pykubelet.pods.admission import Allocatable, admit
from pykubelet.pods.worker import PodWorker, WorkerDeps
from pykubelet.util.log import get_logger

log = get_logger(__name__)

TERMINAL_PHASES = ("Succeeded", "Failed")


class PodDispatcher:
    def __init__(self, deps: WorkerDeps, node_name: str, allocatable: Allocatable,
                 sysctls: SysctlAllowlist | None = None):
        self.deps = deps
        self.statuses = deps.statuses
        self.node_name = node_name
        self.allocatable = allocatable
        self.sysctls = sysctls or SysctlAllowlist.build()  # safe sysctls + allowedUnsafeSysctls
        self.desired: dict[str, Pod] = {}
        self.workers: dict[str, PodWorker] = {}
        self.rejected: set[str] = set()  # UIDs refused at admission; the kubelet never retries them
        self._by_source: dict[str, dict[str, Pod]] = {}
        self._stopping = False
        self._terminated_at: dict[str, int] = {}  # uid -> the runtime cache's mark when its worker finished
        # Deleted pods this node has stopped and asked the apiserver to forget: finalizers may keep
        # them there a while, and their updates must not terminate or delete them again.
        self._deleted: set[str] = set()

    def _start_worker(self, uid: str, pod: Pod | None) -> PodWorker:
        worker = PodWorker(uid, pod, self.deps, self._worker_done)
        self.workers[uid] = worker
        worker.start()
        return worker

    def set_pods(self, pods: Iterable[Pod], source: str = "file") -> None:
        """The whole desired set of one source: start, update or terminate workers to match."""
        self._by_source[source] = {p.uid: p for p in pods}
        new: dict[str, Pod] = {}
        for source_pods in self._by_source.values():
            new.update(source_pods)
        for uid, pod in new.items():
            if uid in self.rejected:
                continue
            try:
                self._hand_over(uid, pod)
            except Exception as e:  # noqa: BLE001 - a bug meeting one odd pod must not end the source's loop
                log.error("Could not hand a pod to its worker; this is a pykubelet bug", exc_info=e, pod=pod.full_name)
        for uid in self.desired.keys() - new.keys():
            pod = self.desired[uid]
            if uid in self._deleted:
                self._deleted.discard(uid)
                continue
            if uid in self.rejected:
                self.rejected.discard(uid)
                self.statuses.remove(uid)
                continue
            self._terminate(uid, pod, self.workers.get(uid), pod.termination_grace_period_seconds, "Pod removed")
        self.desired = new

    def _hand_over(self, uid: str, pod: Pod) -> None:
        worker = self.workers.get(uid)
        if pod.deletion_timestamp:
            self._terminate(uid, pod, worker, pod.deletion_grace_period_seconds, "Pod deleted")
        elif worker is None:
            if uid not in self.desired and self._admitted(pod):
                log.info("Pod added", pod=pod.full_name, uid=uid)
                self._start_worker(uid, pod)
        elif not worker.terminating and pod is not self.desired.get(uid):
            worker.update(pod)

    def _terminate(self, uid: str, pod: Pod, worker: PodWorker | None, grace: int | None, why: str) -> None:
        if worker is not None and worker.terminating or worker is None and uid in self._deleted:
            return
        log.info(f"{why}; terminating", pod=pod.full_name, uid=uid)
        self.deps.history.terminating(pod, why, grace)
        if worker is None:
            if uid in self._terminated_at or pod.api_phase in TERMINAL_PHASES and uid not in self.desired:
                # Nothing of it runs here; only the apiserver still has to forget it.
                if pod.deletion_timestamp:
                    self._finish_deletion(pod)
                return
            worker = self._start_worker(uid, pod)
        worker.terminate(grace, pod)

    def _admitted(self, pod: Pod) -> bool:
        if pod.api_phase in TERMINAL_PHASES:
            return False  # finished before this agent saw it: the kubelet does not run it again
        running = [w.pod for w in self.workers.values() if w.pod is not None and not w.terminating]
        rejection = admit(pod, running, self.node_name, self.allocatable, self.sysctls)
        if rejection is None:
            ignored = unsupported_fields(pod)
            if ignored:
                message = f"Fields not supported by pykubelet yet, ignored: {', '.join(ignored)}"
                log.warning("Pod uses fields pykubelet ignores", pod=pod.full_name, fields=",".join(ignored))
                self.deps.recorder.record(pod_ref(pod.namespace, pod.name, pod.uid), "Warning", "UnsupportedFields", message)
            self.deps.history.admitted(pod, ignored)
            return True
        message = f"Pod was rejected: {rejection.message}"
        log.warning("Pod rejected at admission", pod=pod.full_name, reason=rejection.reason, message=message)
        self.rejected.add(pod.uid)
        self.statuses.set(pod, {"phase": "Failed", "reason": rejection.reason, "message": message,
                                "containerStatuses": []})
        self.deps.recorder.record(pod_ref(pod.namespace, pod.name, pod.uid), "Warning", rejection.reason, message)
        self.deps.history.rejected(pod, rejection.reason, message)
        return False

    def housekeeping(self, runtime_uids: Iterable[str], listed: int) -> None:
        """Terminate pods the runtime holds that no source wants; restart missing workers.

        Call only once every source has delivered its first set, or a restarted agent would
        kill pods it simply has not read yet. `listed` is the runtime cache's generation when
        runtime_uids was listed: pods terminated after that are not orphans, only not yet gone
        from that listing.
        """
        self._terminated_at = {u: t for u, t in self._terminated_at.items() if t > listed}
        for uid in runtime_uids:
            if uid not in self.desired and uid not in self.workers and uid not in self._terminated_at:
                log.info("Found pod in the runtime that no source wants; terminating", uid=uid)
                self._start_worker(uid, None)
        for uid, pod in self.desired.items():
            if uid not in self.workers and uid not in self.rejected and uid not in self._terminated_at \
                    and not pod.deletion_timestamp and pod.api_phase not in TERMINAL_PHASES:
                log.warning("Pod had no worker; starting one", pod=pod.full_name)
                self._start_worker(uid, pod)

    def _worker_done(self, uid: str) -> None:
        worker = self.workers.pop(uid, None)
        if self._stopping or worker is None or not worker.terminating:
            return  # stopping, or a crashed worker: housekeeping starts a new one
        self._terminated_at[uid] = self.deps.cache.mark()
        pod = self.desired.get(uid)
        if pod is None:
            self.statuses.remove(uid)  # gone from every source: no status to write or delete
            return
        if pod.deletion_timestamp:
            self._finish_deletion(pod)
        else:
            # Terminated while a source added it again (same content, same UID): run it anew.
            self._terminated_at.pop(uid, None)
            self._start_worker(uid, pod)

    def _finish_deletion(self, pod: Pod) -> None:
        self._deleted.add(pod.uid)
        self.statuses.finish_deletion(pod)

    async def stop(self) -> None:
        """Cancel every worker and wait for each to end: the agent stops, the pods keep running.

        Cancelled itself meanwhile, it still waits for every worker, then raises CancelledError:
        its caller must learn that it was cancelled, and no worker may outlive the agent.
        """
        self._stopping = True
        tasks = [worker.task for worker in self.workers.values() if worker.task is not None]
        for task in tasks:
            task.cancel()
        cancelled: asyncio.CancelledError | None = None
        pending = set(tasks)
        while pending:
            try:
                _, pending = await asyncio.wait(pending)  # never cancels what it waits for
            except asyncio.CancelledError as e:
                cancelled = e
        if cancelled is not None:
            raise cancelled
