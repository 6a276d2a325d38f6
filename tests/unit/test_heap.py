"""The agent hands the C heap's free pages back to the kernel once a minute (util/heap.py), in a
thread: after a burst, its RSS falls back instead of keeping its peak."""

from __future__ import annotations

import asyncio
import threading

import pytest

from pykubelet.util import heap
from tests.helpers import wait_for


def rss_mib() -> float:
    with open("/proc/self/smaps_rollup") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Rss:")) / 1024


@pytest.mark.looptime
async def test_the_heap_is_trimmed_once_a_minute_off_the_event_loop():
    calls = []

    def trim(pad: int) -> int:
        calls.append((pad, threading.current_thread()))
        return 1
    loop = asyncio.get_running_loop()
    task = asyncio.create_task(heap.give_back_free_memory(trim=trim))
    await asyncio.sleep(59)
    assert calls == []
    await asyncio.sleep(2)
    assert len(calls) == 1
    await asyncio.sleep(60)
    assert len(calls) == 2
    assert all(pad == 0 and thread is not threading.main_thread() for pad, thread in calls)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert loop.time() >= 120


@pytest.mark.skipif(heap.malloc_trim() is None, reason="a C library without malloc_trim")
async def test_after_a_burst_the_freed_memory_leaves_the_rss():
    """60 MB of blocks malloc keeps in its heap (100 KB each, under its mmap threshold), all freed
    but the last (so the heap's top stays in use and free() alone gives nothing back)."""
    blocks = [bytearray(100_000) for _ in range(600)]
    kept = blocks[-1]
    del blocks
    before = rss_mib()
    task = asyncio.create_task(heap.give_back_free_memory(every=0.01))
    try:
        await wait_for(lambda: rss_mib() < before - 40, 10, "the freed 60 MB given back")
    finally:
        task.cancel()
    assert len(kept) == 100_000
