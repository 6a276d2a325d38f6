"""The agent's and the proxy's shared lifecycle helpers (util/tasks.py)."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from pykubelet.util.tasks import LoopDied, Tasks, cancel_on_signals


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_a_signal_cancels_the_run_and_its_stop_phase_runs(sig):
    loop, stopped = asyncio.get_running_loop(), []
    tasks = Tasks()

    async def run() -> None:
        cancel_on_signals()
        tasks.loop("forever", asyncio.Event().wait())
        try:
            raise await tasks.first_death()
        finally:
            await tasks.stop()
            stopped.append(tasks.alive())

    task = asyncio.create_task(run())
    try:
        await asyncio.sleep(0.01)
        os.kill(os.getpid(), sig)
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 5)
    finally:
        for s in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(s)
    assert stopped == [False]  # the loop was stopped, not left running


async def test_a_loop_that_ends_is_reported_by_name():
    tasks = Tasks()
    tasks.loop("forever", asyncio.Event().wait())
    tasks.loop("sync", asyncio.sleep(0))
    died = await asyncio.wait_for(tasks.first_death(), 5)
    await tasks.stop()
    assert isinstance(died, LoopDied) and "loop sync ended" in str(died)
