"""One record per pod: its phases, what goes with it, and stopping the dispatcher (every worker
ends, the pods keep running, and a cancelled stop still says it was cancelled)."""

from __future__ import annotations

import asyncio

import pytest

from pykubelet.pods.record import IllegalTransition, Phase, PodRecords
from pykubelet.util import metrics
from tests.unit.core.harness import Core, pod, until
from tests.unit.core.test_node_life import deleted

pytestmark = pytest.mark.looptime


def phase(node, uid="uid-web"):
    record = node.dispatcher.records.get(uid)
    return record.phase if record is not None else None


def probe_series(uid="uid-web"):
    return [s for family in metrics.PROBES.collect() for s in family.samples if s.labels.get("pod_uid") == uid]


async def housekeeping(node):
    """One housekeeping pass, as the agent runs it, on a listing newer than what was asked now."""
    await node.cache.newer_than("", node.cache.mark())
    node.dispatcher.housekeeping(node.cache.uids(), node.cache.listed)


async def test_a_removed_pod_goes_syncing_terminating_terminated_then_is_dropped_with_its_metrics(node):
    probe = {"exec": {"command": ["ready"]}, "periodSeconds": 1}
    node.dispatcher.set_pods([pod(containers=[{"name": "app", "image": "busybox:1.36", "readinessProbe": probe}])])
    assert phase(node) is Phase.SYNCING
    await until(lambda: node.condition("Ready").get("status") == "True", what="Ready")
    assert probe_series() and "uid-web" in metrics._started_pods
    node.dispatcher.set_pods([])
    assert phase(node) is Phase.TERMINATING
    await until(lambda: not node.dispatcher.workers, what="its worker done")
    assert phase(node) is Phase.TERMINATED and node.statuses.get("uid-web") is None
    assert probe_series()  # still served: the record stays until the runtime's listing shows it gone
    await housekeeping(node)
    assert phase(node) is None
    assert probe_series() == [] and "uid-web" not in metrics._started_pods


async def test_a_deleted_pod_is_terminated_then_deleted_for_good_and_dropped_once_no_source_has_it(node):
    spec = pod()
    node.dispatcher.set_pods([spec], "api")
    await until(lambda: node.status().get("phase") == "Running")
    node.dispatcher.set_pods([deleted(spec, 5)], "api")
    assert phase(node) is Phase.TERMINATING
    await until(lambda: phase(node) is Phase.DELETED, what="deleted")
    for _ in range(3):  # finalizers keep it listed: its updates change nothing
        node.dispatcher.set_pods([deleted(spec, 0)], "api")
        await housekeeping(node)
        assert phase(node) is Phase.DELETED and not node.dispatcher.workers
    assert len(node.runtime.stops) == 1
    node.dispatcher.set_pods([], "api")
    assert phase(node) is None


async def test_a_rejected_pod_keeps_its_record_while_a_source_has_it(node):
    greedy = pod(containers=[{"name": "app", "image": "busybox:1.36", "resources": {"requests": {"cpu": "64"}}}])
    node.dispatcher.set_pods([greedy])
    assert phase(node) is Phase.REJECTED and node.status()["phase"] == "Failed"
    node.dispatcher.set_pods([greedy])
    assert phase(node) is Phase.REJECTED and not node.dispatcher.workers
    node.dispatcher.set_pods([])
    assert phase(node) is None and node.statuses.get("uid-web") is None


async def test_an_orphan_is_terminated_without_a_spec_and_dropped_once_gone(node, tmp_path):
    first = Core(node.runtime, tmp_path).start()  # the agent before a restart, that ran the pod
    first.dispatcher.set_pods([pod()])
    await until(lambda: first.status().get("phase") == "Running", what="running")
    await first.stop()
    await housekeeping(node)
    record = node.dispatcher.records.get("uid-web")
    assert record.pod is None and record.phase in (Phase.TERMINATING, Phase.TERMINATED)
    await until(lambda: not node.runtime.containers and not node.dispatcher.workers, what="the orphan removed")
    await housekeeping(node)
    assert phase(node) is None


async def test_a_cleanup_that_fails_is_retried_without_stopping_the_pod_again(node):
    node.dispatcher.set_pods([pod()])
    await until(lambda: node.status().get("phase") == "Running")
    node.runtime.fail("RemovePodSandbox", times=2, details="device busy")
    node.dispatcher.set_pods([])
    await until(lambda: phase(node) is Phase.TERMINATED and node.runtime.count("RemovePodSandbox") >= 1,
                what="the cleanup failing")
    assert node.dispatcher.workers  # its worker retries the cleanup
    await until(lambda: not node.runtime.sandboxes and not node.dispatcher.workers, what="everything removed")
    assert [name for name, _, _ in node.runtime.stops] == ["app"]


def test_a_record_moves_only_forward_and_is_dropped_only_once_terminated():
    records = PodRecords(lambda: 0.0)
    record = records.begin("uid-web", pod(), Phase.SYNCING, "admitted")
    with pytest.raises(IllegalTransition, match="syncing -> terminated"):
        record.move(Phase.TERMINATED, "skipping the stop")
    with pytest.raises(IllegalTransition, match="syncing -> dropped"):
        records.drop(record, "forgotten while it runs")
    with pytest.raises(IllegalTransition, match="syncing -> syncing"):
        records.begin("uid-web", pod(), Phase.SYNCING, "a second record")
    record.move(Phase.TERMINATING, "removed")
    record.move(Phase.TERMINATED, "stopped")
    again = records.begin("uid-web", pod(), Phase.SYNCING, "added again")
    assert records.get("uid-web") is again and again.syncs == 0 and len(records) == 1
    again.move(Phase.TERMINATING, "removed")
    again.move(Phase.TERMINATED, "stopped")
    records.drop(again, "gone")
    assert records.get("uid-web") is None and len(records) == 0


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
