"""When the proxy syncs: coalesced, bounded, periodic — kube-proxy's bounded-frequency runner.

A change asks for a sync (`request`); the sync starts at once unless the previous one started
less than `min_interval` ago, in which case it starts when that much time has passed, so a burst
of changes within minSyncPeriod becomes one sync. With nothing asked, a periodic sync comes every
`period` (syncPeriod). A failed sync is tried again after `retry` (or sooner, on the next change).
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable

from pykubelet.util.log import get_logger
from pykubelet.util.timeouts import within

log = get_logger(__name__)


class SyncRunner:
    def __init__(self, sync: Callable[[bool], Awaitable[bool]], min_interval: float, period: float,
                 retry: float | None = None):
        """sync(periodic) -> whether it succeeded."""
        self._sync = sync
        self.min_interval = min_interval
        self.period = period
        self.retry = period if retry is None else retry
        self._wanted = asyncio.Event()
        self.syncs = 0  # how many have run (for tests and logs)

    def request(self) -> None:
        self._wanted.set()

    async def run(self) -> None:
        clock = asyncio.get_running_loop().time  # the loop's clock: virtual in the unit tests
        wait = self.period
        while True:
            try:
                await within(self._wanted.wait(), wait)
                periodic = False
            except asyncio.TimeoutError:
                periodic = True
            self._wanted.clear()
            started = clock()
            try:
                ok = await self._sync(periodic)
            except Exception as e:  # a bug in one sync must not end the loop: log it, try again later
                log.error("Proxy rules sync crashed", exc_info=e)
                ok = False
            self.syncs += 1
            due = started + (self.period if ok else min(self.retry, self.period))
            rest = self.min_interval - (clock() - started)
            if rest > 0:
                await asyncio.sleep(rest)  # changes meanwhile only set _wanted: they coalesce
            wait = max(0.0, due - clock())
