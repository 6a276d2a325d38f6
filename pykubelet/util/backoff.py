"""The kubelet's restart back-off: per key, 10 s doubling to 5 min, forgotten after 10 min.

The first restart after a crash is immediate; each next one waits twice as long as the last,
counted from when the container exited. A container that ran for longer than twice the
maximum since its last restart starts again from the initial delay (so a long-lived container
that crashes once is restarted at once).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

INITIAL_SECONDS = 10.0
MAX_SECONDS = 300.0


@dataclass
class _Entry:
    delay: float
    last_update: float


class Backoff:
    def __init__(self, initial: float = INITIAL_SECONDS, maximum: float = MAX_SECONDS,
                 clock: Callable[[], float] = time.time):
        self.initial = initial
        self.maximum = maximum
        self.clock = clock
        self._entries: dict[str, _Entry] = {}

    def _expired(self, event_time: float, entry: _Entry) -> bool:
        return event_time - entry.last_update > 2 * self.maximum

    def delay(self, key: str) -> float:
        """The current back-off of key, 0 if it has none."""
        entry = self._entries.get(key)
        return entry.delay if entry else 0.0

    def in_backoff_since(self, key: str, event_time: float) -> bool:
        """True while less than the current delay has passed since event_time (the exit)."""
        entry = self._entries.get(key)
        if entry is None or self._expired(event_time, entry):
            return False
        return self.clock() - event_time < entry.delay

    def in_backoff_since_update(self, key: str) -> bool:
        """True while less than the current delay has passed since the last failure recorded."""
        entry = self._entries.get(key)
        return entry is not None and self.clock() - entry.last_update < entry.delay

    def remaining_since_update(self, key: str) -> float:
        """Seconds left of the back-off counted from the last failure recorded."""
        entry = self._entries.get(key)
        return max(0.0, entry.delay - (self.clock() - entry.last_update)) if entry else 0.0

    def remaining(self, key: str, event_time: float) -> float:
        """Seconds left before key may be retried, for scheduling the next wake-up."""
        entry = self._entries.get(key)
        if entry is None:
            return 0.0
        return max(0.0, entry.delay - (self.clock() - event_time))

    def next(self, key: str, event_time: float) -> None:
        """Record a retry: start at the initial delay, or double (up to the maximum)."""
        entry = self._entries.get(key)
        if entry is None or self._expired(event_time, entry):
            entry = _Entry(self.initial, 0.0)
        else:
            entry.delay = min(entry.delay * 2, self.maximum)
        entry.last_update = self.clock()
        self._entries[key] = entry

    def forget(self, key_prefix: str) -> None:
        """Drop every entry of a pod (keys start with its UID) when the pod goes away."""
        for key in [k for k in self._entries if k.startswith(key_prefix)]:
            del self._entries[key]
