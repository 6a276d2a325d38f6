"""One record per pod: its phases, what goes with it, and stopping the dispatcher (every worker
ends, the pods keep running, and a cancelled stop still says it was cancelled)."""

from __future__ import annotations

import asyncio

import pytest

from tests.unit.core.harness import pod, until

pytestmark = pytest.mark.looptime


async def test_a_cancelled_stop_still_stops_every_worker_then_reports_its_cancellation(node):
    node.dispatcher.set_pods([pod(), pod("db", "uid-db")])
    await until(lambda: node.status().get("phase") == "Running" and node.status("uid-db").get("phase") == "Running")
    tasks = [task for task in asyncio.all_tasks() if task.get_name().startswith("pod-worker-")]
    assert len(tasks) == 2
    stopping = asyncio.create_task(node.dispatcher.stop())
    await asyncio.sleep(0)  # stop() has begun: it waits for the workers it cancelled
    stopping.cancel()  # the agent's own shutdown is cut short (a second Ctrl-C, a timeout)
    with pytest.raises(asyncio.CancelledError):
        await stopping
    assert all(task.done() for task in tasks)  # no worker left behind
    assert node.runtime.running("app") and len(node.runtime.containers) == 2  # the pods keep running
