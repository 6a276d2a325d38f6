"""The agent's stop phase (the pod path's stop, which the agent and this core share): every loop,
worker and probe ends; the pods keep running for the next agent to adopt."""

from __future__ import annotations

import asyncio

import pytest

from tests.fakes.runtime import FakeRuntime
from tests.unit.core.harness import Core, clock, pod, until

pytestmark = pytest.mark.looptime

PROBES = {"readinessProbe": {"exec": {"command": ["ready"]}, "periodSeconds": 1},
          "livenessProbe": {"exec": {"command": ["alive"]}, "periodSeconds": 1}}


def probe_tasks() -> list[asyncio.Task]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith("probe-") and not t.done()]


async def test_after_the_stop_phase_no_probe_runs_and_the_pod_does(tmp_path):
    runtime = FakeRuntime(clock)
    runtime.exec_results.update(ready=(0, b""), alive=(0, b""))
    node = Core(runtime, tmp_path).start()
    node.dispatcher.set_pods([pod(containers=[{"name": "app", "image": "busybox:1.36", **PROBES}])])
    await until(lambda: node.condition("Ready").get("status") == "True", what="Ready")
    assert len(probe_tasks()) == 2

    await node.stop()

    assert probe_tasks() == []
    probed = len(runtime.execs)
    await asyncio.sleep(30)
    assert len(runtime.execs) == probed  # nothing probes a container the stopped agent left behind
    assert runtime.running("app")
