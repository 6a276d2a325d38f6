"""Driver work that housekeeping starts and does not wait for: the kubelet's pending operations.

Housekeeping runs every few seconds and does more than CSI (orphaned directories, cgroups); a
driver that does not answer must hold up none of it, nor another pod's teardown. So each piece
of work (a volume's teardown, a leftover staging's unstage) runs as its own task, keyed by its
volume: at most one in flight per key, as the kubelet runs one operation per volume at a time.
Each driver call in it keeps its own deadline (node_client.CALL_TIMEOUT), so a hanging driver
costs one task for that long, then counts as a failure.

A failure is tried again with the kubelet's per-operation back-off (0.5 s doubling to 2m2s),
except while the driver is not registered: then it is asked for again at each housekeeping, so
soon after it registers.
"""

from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable

from pykubelet.util.backoff import Backoff
from pykubelet.util.log import get_logger
from pykubelet.volumes.csi.operations import CsiOperationError, DriverMissing

log = get_logger(__name__)

RETRY_INITIAL_SECONDS, RETRY_MAX_SECONDS = 0.5, 122.0
"""The kubelet's back-off of a failed volume operation."""

Work = Callable[[], Awaitable[list[CsiOperationError]]]
"""A piece of driver work; the failures it met (none: done)."""


def backoff_key(key: str) -> str:
    """`key` as a Backoff's key: Backoff.forget drops every key with the prefix it is given, and
    no key of ours contains a NUL, so none of these is a prefix of another."""
    return key + "\0"


class InFlight:
    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._retry = Backoff(RETRY_INITIAL_SECONDS, RETRY_MAX_SECONDS, clock)

    def start(self, key: str, work: Work) -> None:
        """Start `work` as its own task, unless work of `key` is in flight or backing off."""
        if key in self._tasks or self._retry.in_backoff_since_update(backoff_key(key)):
            return
        self._tasks[key] = asyncio.create_task(self._run(key, work), name=f"csi-housekeeping {key}")

    def busy(self, key: str) -> bool:
        return key in self._tasks

    async def _run(self, key: str, work: Work) -> None:
        try:
            failures = await work()
        except Exception as e:  # a bug in one volume's work must not end the others'
            log.exception("CSI housekeeping work failed", key=key)
            failures = [CsiOperationError(f"{type(e).__name__}: {e}")]
        finally:
            del self._tasks[key]
        if not failures:
            self._retry.forget(backoff_key(key))
        elif not all(isinstance(e, DriverMissing) for e in failures):
            self._retry.next(backoff_key(key), self._retry.clock())

    async def settle(self) -> None:
        """Until no work is in flight (what was started, and what finishing work started)."""
        while self._tasks:
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    async def stop(self) -> None:
        """Cancel the work in flight (the agent stops; what was not done is found on disk at the next start)."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
