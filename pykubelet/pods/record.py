"""One record per pod UID: what this node has decided about a pod (the kubelet's podSyncStatus).

The dispatcher and the pod's worker share it instead of keeping their own copies: it holds the
one copy of the spec the worker works towards, the pod's phase on this node, and the facts one
sync hands to the next. Its phase moves one way:

    (new) -> SYNCING -> TERMINATING -> TERMINATED -> DELETED -> (dropped)
    (new) -> REJECTED -> (dropped)

TERMINATED is left for SYNCING again only as a new record (a pod added again while it
terminated runs anew, with nothing carried over). Every change of phase, a new record and a
dropped one go through `_transition`, which refuses what cannot happen and logs the rest.
"""

from __future__ import annotations

import asyncio
import enum
from typing import Callable, Iterator

from pykubelet.api.pod import Pod
from pykubelet.runtime.state import PodRuntimeState
from pykubelet.util import metrics
from pykubelet.util.log import get_logger

log = get_logger(__name__)


class Phase(enum.Enum):
    SYNCING = "syncing"
    """The worker runs the pod towards its spec."""
    TERMINATING = "terminating"
    """Asked to stop for good (removed, deleted, or an orphan): the worker stops its containers."""
    TERMINATED = "terminated"
    """Nothing of it runs any more; the worker removes what is left, then ends."""
    DELETED = "deleted"
    """Terminated, and the apiserver was asked to forget it: finalizers may keep it listed a while,
    and its updates must neither terminate nor delete it again."""
    REJECTED = "rejected"
    """Refused at admission: Failed for good, never run (the kubelet never retries it)."""


class IllegalTransition(RuntimeError):
    """A change of phase that cannot happen: a bug in the dispatcher or the worker."""


_ALLOWED: frozenset[tuple[Phase | None, Phase | None]] = frozenset({
    (None, Phase.SYNCING), (None, Phase.TERMINATING), (None, Phase.REJECTED), (None, Phase.DELETED),
    (Phase.SYNCING, Phase.TERMINATING), (Phase.TERMINATING, Phase.TERMINATED), (Phase.TERMINATED, Phase.DELETED),
    # A pod a source holds again once it has terminated: a new record, run (or refused) anew.
    (Phase.TERMINATED, Phase.SYNCING), (Phase.TERMINATED, Phase.REJECTED),
    (Phase.DELETED, Phase.SYNCING), (Phase.DELETED, Phase.REJECTED),
    # Dropped: gone from every source, and from the runtime's listing.
    (Phase.TERMINATED, None), (Phase.DELETED, None), (Phase.REJECTED, None),
})


def _transition(uid: str, name: str, old: Phase | None, new: Phase | None, why: str) -> None:
    """The one place a pod's phase changes."""
    if (old, new) not in _ALLOWED:
        raise IllegalTransition(f"pod {name} ({uid}): {old.value if old else 'new'} -> "
                                f"{new.value if new else 'dropped'} ({why})")
    log.debug("Pod phase", pod=name, uid=uid, old=old.value if old else "new", new=new.value if new else "dropped",
              why=why)


class PodRecord:
    """One pod on this node; its phase changes only through `move` (or the table's begin/drop)."""

    def __init__(self, uid: str, pod: Pod | None, phase: Phase, seen_at: float):
        self.uid = uid
        self.pod = pod
        """The spec the worker works towards: the latest a source gave while it syncs, the one
        that ordered its termination after (a deleted pod's carries the deletion). None: an
        orphan, that the runtime holds and no source knows."""
        self._phase = phase
        self.seen_at = seen_at
        """When this node first saw it (wall clock): kubelet_pod_start_duration_seconds counts from here."""
        self.grace: int | None = None
        """The termination's grace period; None until asked (then: the pod's own, or its containers')."""
        self.start_time = 0.0
        """status.startTime: set at its first sync, from the runtime when it held the pod already."""
        self.syncs = 0
        self.waiting: dict[str, tuple[str, str]] = {}
        """Container name -> (reason, message) it waits with, from the last sync."""
        self.evicted: tuple[str, str] | None = None
        """(reason, message): Failed for good, its containers killed (its active deadline ran out, or
        the eviction manager evicted it)."""
        self.disrupted = False
        """Set with `evicted` when the node itself disrupted the pod (the eviction manager, a node
        shutdown), not the pod's own deadline: its status says so (DisruptionTarget)."""
        self.evict_grace: int | None = None
        """Set with `evicted` until its worker has killed it: the grace period of that kill."""
        self.terminated_mark: int | None = None
        """The runtime cache's mark when its worker finished; until a listing newer than that, the
        runtime may still show the pod, which is then no orphan."""
        self.task: asyncio.Task[None] | None = None
        """Its worker's task, while one runs."""

    @property
    def phase(self) -> Phase:
        return self._phase

    @property
    def name(self) -> str:
        return self.pod.full_name if self.pod else self.uid

    def move(self, phase: Phase, why: str) -> None:
        _transition(self.uid, self.name, self._phase, phase, why)
        self._phase = phase

    def termination_grace(self, state: PodRuntimeState) -> int:
        """The termination's grace period: as ordered, else the pod's own (an orphan's: as its
        containers recorded it); fixed once asked, so a retried step keeps it."""
        if self.grace is None:
            self.grace = self.pod.termination_grace_period_seconds if self.pod else state.grace_seconds()
        return self.grace

    def settled(self, listed: int | None) -> bool:
        """Its worker is done, and the runtime listing `listed` (a cache generation) is newer than
        what the worker did: what the runtime still shows of it is no longer its worker's doing."""
        return self.task is None and (self.terminated_mark is None or
                                      listed is not None and self.terminated_mark <= listed)

    def __repr__(self) -> str:
        return f"PodRecord({self.name!r}, {self._phase.value})"


class PodRecords:
    """Every pod's record, by UID: the dispatcher's one table of pods."""

    def __init__(self, clock: Callable[[], float]):
        self._clock = clock
        self._records: dict[str, PodRecord] = {}

    def get(self, uid: str) -> PodRecord | None:
        return self._records.get(uid)

    def __iter__(self) -> Iterator[PodRecord]:
        return iter(list(self._records.values()))  # a copy: callers begin and drop records as they go

    def __len__(self) -> int:
        return len(self._records)

    def begin(self, uid: str, pod: Pod | None, phase: Phase, why: str) -> PodRecord:
        """A new record for the pod, replacing a finished one: nothing of that is carried over."""
        old = self._records.get(uid)
        _transition(uid, pod.full_name if pod else uid, old.phase if old else None, phase, why)
        record = self._records[uid] = PodRecord(uid, pod, phase, self._clock())
        return record

    def drop(self, record: PodRecord, why: str) -> None:
        """The pod is gone from every source and from the runtime: forget it, its metrics included."""
        _transition(record.uid, record.name, record.phase, None, why)
        if self._records.get(record.uid) is record:
            del self._records[record.uid]
        metrics.forget_pod(record.uid)
