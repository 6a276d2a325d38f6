"""Coalesced syncs: a burst of changes within minSyncPeriod is one sync; a periodic one every
syncPeriod; a failed one is retried. (looptime: virtual time, so the periods pass at once.)"""

from __future__ import annotations

import asyncio

import pytest

from pykubelet.proxy.runner import SyncRunner


class Syncs:
    def __init__(self, results=()):
        self.calls: list[tuple[float, bool]] = []
        self.results = list(results)

    async def __call__(self, periodic: bool) -> bool:
        self.calls.append((asyncio.get_running_loop().time(), periodic))
        return self.results.pop(0) if self.results else True


@pytest.mark.looptime
async def test_changes_within_min_sync_period_become_one_sync():
    syncs = Syncs()
    runner = SyncRunner(syncs, min_interval=1.0, period=30.0)
    task = asyncio.create_task(runner.run())
    start = asyncio.get_running_loop().time()
    runner.request()
    await asyncio.sleep(0.1)
    for _ in range(50):  # a burst while the first sync's minimum interval runs
        runner.request()
        await asyncio.sleep(0.01)
    await asyncio.sleep(5)
    task.cancel()
    times = [round(t - start, 2) for t, _ in syncs.calls]
    assert times == [0.0, 1.0]  # the first at once, the whole burst in one, a minSyncPeriod later


@pytest.mark.looptime
async def test_a_periodic_sync_comes_every_sync_period_and_a_failure_is_retried_sooner():
    syncs = Syncs(results=[True, False, True])
    runner = SyncRunner(syncs, min_interval=1.0, period=30.0, retry=5.0)
    task = asyncio.create_task(runner.run())
    start = asyncio.get_running_loop().time()
    runner.request()
    await asyncio.sleep(100)
    task.cancel()
    times = [(round(t - start), periodic) for t, periodic in syncs.calls]
    assert times[:4] == [(0, False), (30, True), (35, True), (65, True)]


@pytest.mark.looptime
async def test_a_crashing_sync_does_not_end_the_loop():
    calls = []

    async def boom(periodic: bool) -> bool:
        calls.append(periodic)
        raise KeyError("bug")
    runner = SyncRunner(boom, min_interval=1.0, period=10.0, retry=2.0)
    task = asyncio.create_task(runner.run())
    runner.request()
    await asyncio.sleep(7)
    assert not task.done() and len(calls) == 4  # 0, 2, 4, 6
    task.cancel()
