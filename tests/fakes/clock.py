"""A clock a test sets by hand: what the code under test reads as time.monotonic (or any
float clock) is `now`, which the test moves."""

from __future__ import annotations


class ManualClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
