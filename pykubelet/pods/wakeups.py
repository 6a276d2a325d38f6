"""The one wake-up path of pod workers: "sync pod <uid> now".

It exists before everything that wakes pods (the PLEG, probes, watched ConfigMaps and Secrets,
mirror pods, the node's registration) and is handed to each of them when it is built, as the
plain callable `wake`. The dispatcher registers each worker here while it runs, so a producer
never needs to know the dispatcher, and a wake-up for a pod without a worker is simply dropped
(housekeeping starts missing workers).
"""

from __future__ import annotations

from typing import Callable


class Wakeups:
    def __init__(self) -> None:
        self._targets: dict[str, Callable[[], None]] = {}

    def wake(self, uid: str) -> None:
        """Something about the pod changed: its worker syncs now (bursts collapse into one sync)."""
        target = self._targets.get(uid)
        if target is not None:
            target()

    def wake_all(self) -> None:
        for target in list(self._targets.values()):
            target()

    def register(self, uid: str, target: Callable[[], None]) -> None:
        self._targets[uid] = target

    def unregister(self, uid: str, target: Callable[[], None]) -> None:
        if self._targets.get(uid) == target:  # bound methods of one worker compare equal
            del self._targets[uid]
