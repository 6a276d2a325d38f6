"""`within` keeps a cancellation that comes in the same loop iteration as what it awaits finishing
(Python 3.11's asyncio.wait_for returns the result then, and a loop around it never stops)."""

from __future__ import annotations

import asyncio

import pytest

from pykubelet.util.timeouts import within


async def wait_for_the_event(event: asyncio.Event) -> None:
    while True:  # as the PLEG and the status manager wait for their next kick
        await within(event.wait(), 10)
        event.clear()


async def test_a_cancellation_as_the_awaited_event_is_set_ends_the_loop():
    event = asyncio.Event()
    task = asyncio.create_task(wait_for_the_event(event))
    await asyncio.sleep(0)  # the task now waits for the event
    event.set()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(asyncio.shield(task), 5)  # the test's own bound: shield keeps it honest


async def test_it_gives_the_result_or_a_timeout_error():
    assert await within(asyncio.sleep(0, "done"), 1) == "done"
    with pytest.raises(TimeoutError):
        await within(asyncio.Event().wait(), 0.01)
