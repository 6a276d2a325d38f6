"""The runtime cache: every pod's runtime state as the PLEG last listed it (the kubelet's pod cache).

Only the PLEG writes it; workers read it. A worker that changed its pod's runtime asks for a
state at least as new as that change (`newer_than`), which makes the PLEG relist now instead of
at its next tick; several workers asking at once share one relist. So the runtime is listed by
one loop only, and a sync that changed nothing costs no CRI call at all.

Listings and changes are ordered by a counter, not a clock: a worker that changed the runtime
marks it (`mark`), and a listing covers every change marked before it began. (Two readings of a
clock can be equal; a counter cannot.)
"""

from __future__ import annotations

import asyncio

from pykubelet.cri import errors
from pykubelet.runtime.state import PodRuntimeState


class RuntimeCache:
    def __init__(self) -> None:
        self._states: dict[str, PodRuntimeState] = {}
        self.generation = 0
        """How many changes were marked so far."""
        self.listed: int | None = None
        """The generation when the listing behind the states began; None before the first one."""
        self._failure: tuple[int, errors.CRIError] | None = None
        self._updated = asyncio.Event()
        self.wanted = asyncio.Event()
        """Set when someone waits for a newer state: the PLEG relists at once."""
        self._reinspect: set[str] = set()

    def uids(self) -> set[str]:
        """The pods the runtime holds anything of."""
        return set(self._states)

    def get(self, uid: str) -> PodRuntimeState:
        """The pod's last listed state (empty when the runtime holds nothing of it)."""
        return self._states.get(uid) or PodRuntimeState(uid=uid)

    def mark(self) -> int:
        """Someone changed the runtime (or terminated a pod): a token for `newer_than`."""
        self.generation += 1
        return self.generation

    def reinspect(self, uid: str) -> int:
        """A change of the pod that no listing shows (a container's resources updated in place,
        as the kubelet's resize asks its PLEG to refresh the pod): the next relist inspects the
        pod anyway. Returns the token for `newer_than`, as `mark` does."""
        self._reinspect.add(uid)
        return self.mark()

    def take_reinspect(self) -> set[str]:
        """The pods to inspect whether or not their listing changed (the PLEG's, at a relist's start)."""
        taken, self._reinspect = self._reinspect, set()
        return taken

    async def newer_than(self, uid: str, after: int) -> PodRuntimeState:
        """The pod's state from a listing that began after the change marked `after` (0: any listing).

        Raises the CRIError of a relist that began that late and failed, so the caller retries
        with its back-off instead of waiting for a runtime that does not answer.
        """
        while self.listed is None or self.listed < after:
            if self._failure is not None and self._failure[0] >= after:
                raise self._failure[1]
            updated = self._updated
            self.wanted.set()
            await updated.wait()
        return self.get(uid)

    def update(self, states: dict[str, PodRuntimeState], listed: int) -> None:
        """`listed`: the generation when the listing began."""
        self._states = states
        self.listed = listed
        self._failure = None
        self._notify()

    def fail(self, error: errors.CRIError, listed: int) -> None:
        self._failure = (listed, error)
        self._notify()

    def _notify(self) -> None:
        self._updated.set()
        self._updated = asyncio.Event()
