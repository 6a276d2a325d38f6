"""The sync loop: hands desired pods, runtime events and housekeeping to per-pod workers.

It only hands work out; it never calls the runtime itself (the kubelet's syncLoop). Each source
(static files, the apiserver) delivers its whole set; the union is what the node should run.
What it decided about each pod is that pod's record (pods/record.py), which its worker works.
"""

from __future__ import annotations

import asyncio
from typing import Callable, Iterable, Sequence

from pykubelet.api.pod import Pod, unsupported_fields
from pykubelet.api.pod_status import PodStatus
from pykubelet.api.sysctls import SysctlAllowlist
from pykubelet.kube.events import pod_ref
from pykubelet.pods.admission import Allocatable, admit
from pykubelet.pods.pod_update import needs_sync
from pykubelet.pods.record import Phase, PodRecord, PodRecords
from pykubelet.pods.worker import PodWorker, WorkerDeps
from pykubelet.util.log import get_logger

log = get_logger(__name__)

TERMINAL_PHASES = ("Succeeded", "Failed")


class PodDispatcher:
    def __init__(self, deps: WorkerDeps, node_name: str, allocatable: Allocatable,
                 sysctls: SysctlAllowlist | None = None, pressure: Callable[[], Sequence[str]] = tuple,
                 shutting_down: Callable[[], bool] = lambda: False):
        self.deps = deps
        self.pressure = pressure  # the node's pressure conditions now (the eviction manager's), for admission
        self.shutting_down = shutting_down  # a graceful node shutdown is under way: admit nothing
        self.statuses = deps.statuses
        self.node_name = node_name
        self.allocatable = allocatable
        self.sysctls = sysctls or SysctlAllowlist.build()  # safe sysctls + allowedUnsafeSysctls
        self.records = PodRecords(deps.clock)
        self._by_source: dict[str, dict[str, Pod]] = {}  # each source's last set, as it gave it
        self._stopping = False

    @property
    def desired(self) -> dict[str, Pod]:
        """What the node should run: every source's pods, by UID."""
        union: dict[str, Pod] = {}
        for source_pods in self._by_source.values():
            union.update(source_pods)
        return union

    @property
    def workers(self) -> dict[str, PodRecord]:
        """The records of the pods whose worker runs, by UID."""
        return {record.uid: record for record in self.records if record.task is not None}

    def _start_worker(self, record: PodRecord) -> None:
        PodWorker(record, self.deps, self._worker_done).start()

    def set_pods(self, pods: Iterable[Pod], source: str = "file") -> None:
        """The whole desired set of one source: start, update or terminate workers to match."""
        previous = self.desired
        self._by_source[source] = {p.uid: p for p in pods}
        new = self.desired
        for uid, pod in new.items():
            record = self.records.get(uid)
            if record is not None and record.phase is Phase.REJECTED:
                continue
            try:
                self._hand_over(pod, record, uid in previous)
            except Exception as e:  # noqa: BLE001 - a bug meeting one odd pod must not end the source's loop
                log.error("Could not hand a pod to its worker; this is a pykubelet bug", exc_info=e, pod=pod.full_name)
        for uid in previous.keys() - new.keys():
            pod, record = previous[uid], self.records.get(uid)
            if record is not None and record.phase is Phase.DELETED:
                self._drop_if_settled(record, self.deps.cache.listed)
            elif record is not None and record.phase is Phase.REJECTED:
                self.records.drop(record, "removed")
                self.statuses.remove(uid)
            else:
                self._terminate(pod, record, pod.termination_grace_period_seconds, "Pod removed", True)

    def _hand_over(self, pod: Pod, record: PodRecord | None, was_desired: bool) -> None:
        if pod.deletion_timestamp:
            self._terminate(pod, record, pod.deletion_grace_period_seconds, "Pod deleted", was_desired)
        elif record is None or record.phase in (Phase.TERMINATED, Phase.DELETED) and record.task is None:
            # New, or back once its record finished. One a source already had, yet without a
            # record, was never admitted (it finished before this agent saw it): it never will be.
            if not was_desired and self._admitted(pod):
                log.info("Pod added", pod=pod.full_name, uid=pod.uid)
                self._start_worker(self.records.begin(pod.uid, pod, Phase.SYNCING, "admitted"))
        elif record.phase is Phase.SYNCING and pod is not record.pod:
            previous, record.pod = record.pod, pod
            if previous is None or needs_sync(previous, pod):
                self.deps.wakeups.wake(pod.uid)
            else:  # its status changed (our own write's echo): the status manager keeps the newer copy
                self.statuses.observe(pod)

    def _terminate(self, pod: Pod, record: PodRecord | None, grace: int | None, why: str,
                   was_desired: bool) -> None:
        if record is not None and (record.phase in (Phase.TERMINATING, Phase.DELETED) or
                                   record.phase is Phase.TERMINATED and record.task is not None):
            return  # stopping already (its grace period only ever shortens: the first one holds)
        log.info(f"{why}; terminating", pod=pod.full_name, uid=pod.uid)
        self.deps.history.terminating(pod, why, grace)
        if record is not None and record.phase is Phase.TERMINATED or \
                record is None and pod.api_phase in TERMINAL_PHASES and not was_desired:
            # Nothing of it runs here; only the apiserver still has to forget it.
            if pod.deletion_timestamp:
                self._finish_deletion(pod, record)
            return
        if record is None:
            record = self.records.begin(pod.uid, pod, Phase.TERMINATING, why)
        else:
            record.pod = pod  # the latest spec: a deleted pod's carries the deletion
            record.move(Phase.TERMINATING, why)
        record.grace = grace
        if record.task is None:
            self._start_worker(record)
        else:
            self.deps.wakeups.wake(pod.uid)

    def _admitted(self, pod: Pod) -> bool:
        if pod.api_phase in TERMINAL_PHASES:
            return False  # finished before this agent saw it: the kubelet does not run it again
        # The others count with their allocated resources (a resize still pending does not count).
        allocated = self.deps.syncer.parts.resize_state.pods
        running = [allocated.get(r.uid, r.pod) for r in self.records if r.pod is not None and r.phase is Phase.SYNCING]
        rejection = admit(pod, running, self.node_name, self.allocatable, self.sysctls, self.pressure(),
                          self.shutting_down())
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
        self.records.begin(pod.uid, pod, Phase.REJECTED, rejection.reason)
        self.statuses.set(pod, PodStatus(phase="Failed", reason=rejection.reason, message=message,
                                         observed_generation=pod.generation))
        self.deps.recorder.record(pod_ref(pod.namespace, pod.name, pod.uid), "Warning", rejection.reason, message)
        self.deps.history.rejected(pod, rejection.reason, message)
        return False

    def active_pods(self) -> list[Pod]:
        """The pods this node runs and has not failed for good: what the eviction manager may evict."""
        return [r.pod for r in self.records if r.pod is not None and r.phase is Phase.SYNCING and r.evicted is None]

    def evict(self, uid: str, reason: str, message: str, grace: int) -> bool:
        """Fail the pod for good and have its worker kill it within `grace` seconds (the kubelet's
        killPodNow for an eviction); False when it no longer runs here."""
        record = self.records.get(uid)
        if record is None or record.pod is None or record.phase is not Phase.SYNCING or record.evicted is not None:
            return False
        record.evicted, record.evict_grace, record.disrupted = (reason, message), grace, True
        self.deps.wakeups.wake(uid)
        return True

    def eviction_done(self, uid: str) -> bool:
        """Its worker has killed the evicted pod (or the pod is gone)."""
        record = self.records.get(uid)
        return record is None or record.evict_grace is None

    def housekeeping(self, runtime_uids: Iterable[str], listed: int) -> None:
        """Terminate pods the runtime holds that no source wants; restart missing workers.

        Call only once every source has delivered its first set, or a restarted agent would
        kill pods it simply has not read yet. `listed` is the runtime cache's generation when
        runtime_uids was listed: pods terminated after that are not orphans, only not yet gone
        from that listing.
        """
        desired = self.desired
        for record in self.records:
            if record.uid not in desired and record.phase in (Phase.TERMINATED, Phase.DELETED):
                self._drop_if_settled(record, listed)
        for uid in runtime_uids:
            if uid not in desired and self.records.get(uid) is None:
                log.info("Found pod in the runtime that no source wants; terminating", uid=uid)
                self._start_worker(self.records.begin(uid, None, Phase.TERMINATING, "an orphan"))
        for uid, pod in desired.items():
            record = self.records.get(uid)
            if pod.deletion_timestamp or pod.api_phase in TERMINAL_PHASES or record is not None and (
                    record.task is not None or record.phase is not Phase.SYNCING):
                continue
            log.warning("Pod had no worker; starting one", pod=pod.full_name)
            self._start_worker(record or self.records.begin(uid, pod, Phase.SYNCING, "had no worker"))

    def _drop_if_settled(self, record: PodRecord, listed: int | None) -> None:
        if record.settled(listed):
            self.records.drop(record, "gone from every source and the runtime")

    def _worker_done(self, record: PodRecord) -> None:
        record.task = None
        if self._stopping or record.phase is Phase.SYNCING:
            return  # stopping, or a crashed worker: housekeeping starts a new one
        if record.phase is Phase.TERMINATING:
            record.move(Phase.TERMINATED, "its worker crashed")  # as good as it gets: housekeeping finds the rest
        record.terminated_mark = self.deps.cache.mark()
        pod = self.desired.get(record.uid)
        if pod is None:
            self.statuses.remove(record.uid)  # gone from every source: no status to write or delete
        elif pod.deletion_timestamp:
            self._finish_deletion(pod, record)
        else:
            # Terminated while a source added it again (same content, same UID): run it anew.
            self._start_worker(self.records.begin(pod.uid, pod, Phase.SYNCING, "added again while it terminated"))

    def _finish_deletion(self, pod: Pod, record: PodRecord | None) -> None:
        if record is None:
            self.records.begin(pod.uid, pod, Phase.DELETED, "deleted; nothing of it ran here")
        else:
            record.move(Phase.DELETED, "deleted")
        self.statuses.finish_deletion(pod)

    async def stop(self) -> None:
        """Cancel every worker and wait for each to end: the agent stops, the pods keep running.

        Cancelled itself meanwhile, it still waits for every worker, then raises CancelledError:
        its caller must learn that it was cancelled, and no worker may outlive the agent.
        """
        self._stopping = True
        tasks = [record.task for record in self.records if record.task is not None]
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
