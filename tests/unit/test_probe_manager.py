"""The probe manager on the typed model: what a restarted agent reports before any probe ran, a
probe task that raises (a bug) fails its probe instead of dying unseen, `stop` ends every task,
and a startup probe that passed (or was seeded across a restart) stops."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from pykubelet.api.pod import parse_pod
from pykubelet.api.pod_status import ContainerStatus, PodStatus, Running
from pykubelet.api.times import rfc3339
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.kube.events import EventRecorder
from pykubelet.probes.manager import ProbeManager
from tests.helpers import wait_for

pytestmark = pytest.mark.looptime

AGENT_START = 1_700_000_000.0
BEFORE_AGENT, AFTER_AGENT = AGENT_START - 11, AGENT_START + 5


class Exec:
    """ExecSync that answers with `exit_code`, or raises `error` (not a CRI error: a bug)."""

    def __init__(self) -> None:
        self.exit_code, self.error, self.calls = 1, None, []

    async def exec_sync(self, container_id: str, cmd: list[str], timeout: int) -> api.ExecSyncResponse:
        self.calls.append((container_id, cmd[0]))
        if self.error is not None:
            raise self.error
        return api.ExecSyncResponse(exit_code=self.exit_code)


def manager(cri: Exec, woken: list[str] | None = None) -> ProbeManager:
    return ProbeManager(cri, EventRecorder(None, "node1"), (woken if woken is not None else []).append,
                        clock=lambda: AGENT_START)


def pod(container: dict[str, Any], ready: str | None = None, sidecar: bool = False, reported: list | None = None):
    raw: dict[str, Any] = {"metadata": {"name": "web", "uid": "u1"}, "spec": {"containers": [
        {"name": "app", "image": "busybox", **({} if sidecar else container)}]}}
    if sidecar:
        raw["spec"]["initContainers"] = [{"name": "side", "image": "busybox", "restartPolicy": "Always", **container}]
    if ready is not None or reported is not None:
        raw["status"] = {"conditions": [{"type": "Ready", "status": ready or "False"}],
                         "initContainerStatuses": reported or []}
    return parse_pod(raw, where="test")


def status_of(probes: ProbeManager, p, started_at: float, cid: str = "c1") -> ContainerStatus:
    status = ContainerStatus("app", "busybox", Running(rfc3339(started_at) or ""), container_id=f"containerd://{cid}")
    probes.update_pod_status(p, PodStatus("Running", [status]))
    return status


READINESS = {"readinessProbe": {"exec": {"command": ["check"]}, "periodSeconds": 10}}


async def test_a_restarted_agent_keeps_a_ready_pods_container_ready_before_its_probe_ran():
    cri = Exec()
    probes = manager(cri)
    slow = pod({"readinessProbe": {**READINESS["readinessProbe"], "initialDelaySeconds": 3600}}, ready="True")
    probes.track(slow, slow.containers[0], "c1", "", BEFORE_AGENT)
    assert status_of(probes, slow, BEFORE_AGENT).ready is True
    assert cri.calls == []  # no probe ran: this is the restart rule, not a result
    was_not_ready = pod(READINESS, ready="False")
    assert status_of(probes, was_not_ready, BEFORE_AGENT, cid="other").ready is False
    await probes.stop()


async def test_a_container_started_after_the_agent_is_not_ready_until_its_probe_passes():
    cri = Exec()
    probes = manager(cri)
    p = pod(READINESS, ready="True")
    probes.track(p, p.containers[0], "c1", "", AFTER_AGENT)
    assert status_of(probes, p, AFTER_AGENT).ready is False
    await wait_for(lambda: cri.calls, 5, "the first probe")
    assert status_of(probes, p, AFTER_AGENT).ready is False  # it failed
    cri.exit_code = 0
    await wait_for(lambda: status_of(probes, p, AFTER_AGENT).ready, 30, "ready once the probe passes")
    await probes.stop()


async def test_after_a_restart_a_failing_probe_ends_the_kept_readiness():
    cri = Exec()
    probes = manager(cri)
    p = pod({"readinessProbe": {"exec": {"command": ["check"]}, "periodSeconds": 1, "failureThreshold": 2}},
            ready="True")
    probes.track(p, p.containers[0], "c1", "", BEFORE_AGENT)
    await wait_for(lambda: len(cri.calls) == 1, 5, "the first failure")
    assert status_of(probes, p, BEFORE_AGENT).ready is True  # below its failure threshold
    await wait_for(lambda: not status_of(probes, p, BEFORE_AGENT).ready, 5, "not ready at the threshold")
    await probes.stop()


async def test_a_probe_task_that_raises_is_logged_as_a_bug_and_fails_its_probe(caplog):
    cri, woken = Exec(), []
    cri.error = RuntimeError("boom")
    probes = manager(cri, woken)
    ready_pod = pod(READINESS, ready="True")
    probes.track(ready_pod, ready_pod.containers[0], "c1", "", BEFORE_AGENT)  # ready by the restart rule...
    live_pod = pod({"livenessProbe": {"exec": {"command": ["alive"]}}})
    probes.track(live_pod, live_pod.containers[0], "c2", "", AFTER_AGENT)
    tasks = [t for r in probes._pods["u1"].values() for t in r.tasks.values()]
    with caplog.at_level(logging.ERROR):
        await wait_for(lambda: all(t.done() for t in tasks), 5, "both probe tasks to end")
    assert all(t.exception() is None for t in tasks)  # nothing left for asyncio to complain about
    assert status_of(probes, ready_pod, BEFORE_AGENT).ready is False  # ...until its probe task failed
    assert probes.unhealthy("u1") == {"c2": "Container failed liveness probe, will be restarted: "
                                            "probe could not run: RuntimeError"}
    bugs = [r for r in caplog.records if "pykubelet bug" in r.getMessage()]
    assert len(bugs) == 2 and all(r.exc_info for r in bugs)
    assert woken == ["u1", "u1"]


async def test_stop_cancels_and_awaits_every_probe_task():
    probes = manager(Exec())
    p = pod({**READINESS, "livenessProbe": {"exec": {"command": ["alive"]}, "periodSeconds": 10}})
    for cid in ("c1", "c2"):
        probes.track(p, p.containers[0], cid, "", AFTER_AGENT)
    tasks = [t for r in probes._pods["u1"].values() for t in r.tasks.values()]
    assert len(tasks) == 4 and not any(t.done() for t in tasks)
    await probes.stop()
    assert all(t.cancelled() for t in tasks)
    assert probes.unstarted("u1") == set() and probes.unhealthy("u1") == {}


STARTUP = {"startupProbe": {"exec": {"command": ["up"]}, "periodSeconds": 1}}


async def test_a_sidecar_reported_started_before_the_restart_is_seeded_started():
    cri = Exec()
    probes = manager(cri)
    reported = [{"name": "side", "started": True, "containerID": "containerd://s1"}]
    p = pod(STARTUP, sidecar=True, ready="True", reported=reported)
    probes.track(p, p.init_containers[0], "s1", "", BEFORE_AGENT)
    assert probes.unstarted("u1") == set()
    await asyncio.sleep(5)
    assert cri.calls == []  # started: its startup probe does not run again
    fresh = pod(STARTUP, sidecar=True, ready="True", reported=reported)
    probes.track(fresh, fresh.init_containers[0], "s2", "", AFTER_AGENT)  # a new instance: not seeded
    assert probes.unstarted("u1") == {"s2"}
    await probes.stop()


async def test_a_startup_probe_stops_once_it_passed():
    cri = Exec()
    cri.exit_code = 0
    probes = manager(cri)
    p = pod(STARTUP)
    probes.track(p, p.containers[0], "c1", "", AFTER_AGENT)
    assert probes.unstarted("u1") == {"c1"}
    await wait_for(lambda: not probes.unstarted("u1"), 5, "started")
    await asyncio.sleep(10)
    assert cri.calls == [("c1", "up")]
    await probes.stop()
