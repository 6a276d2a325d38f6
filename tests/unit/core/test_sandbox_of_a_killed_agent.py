"""An agent killed during RunPodSandbox: the runtime may still finish the sandbox, which no agent
has then seen. The next agent finds it by its labels, as the kubelet does: it removes it when its
pod is no longer wanted, and runs the pod in it when it is."""

from __future__ import annotations

import asyncio

import pytest

from pykubelet.pods.housekeeping import housekeeping
from pykubelet.runtime import specs
from tests.fakes.runtime import FakeRuntime
from tests.unit.core.harness import Core, clock, pod, until

pytestmark = pytest.mark.looptime


async def sandbox_the_killed_agent_asked_for(runtime: FakeRuntime, tmp_path, name: str, uid: str) -> str:
    """What the runtime completes after its caller died: a ready sandbox, no container yet."""
    return await runtime.run_pod_sandbox(specs.sandbox_config(pod(name, uid), 0, str(tmp_path / "logs")))


async def test_a_sandbox_whose_pod_went_while_the_agent_was_down_is_removed(tmp_path):
    runtime = FakeRuntime(clock)
    left = await sandbox_the_killed_agent_asked_for(runtime, tmp_path, "gone", "uid-gone")
    node = Core(runtime, tmp_path).start()
    source_ready = asyncio.Event()
    task = asyncio.create_task(housekeeping(node.dispatcher, node.cache, node.pleg.relisted, [source_ready],
                                            str(tmp_path / "root")))
    try:
        node.dispatcher.set_pods([pod()])
        source_ready.set()
        await until(lambda: left not in runtime.sandboxes, what="the unknown pod's sandbox removed")
        assert "StopPodSandbox" in runtime.calls  # stopped first: its network is torn down
        await until(lambda: node.status().get("phase") == "Running", what="the wanted pod running")
    finally:
        task.cancel()
        await node.stop()


async def test_a_sandbox_of_a_wanted_pod_is_adopted_not_doubled(tmp_path):
    runtime = FakeRuntime(clock)
    left = await sandbox_the_killed_agent_asked_for(runtime, tmp_path, "web", "uid-web")
    node = Core(runtime, tmp_path).start()
    try:
        node.dispatcher.set_pods([pod()])
        await until(lambda: runtime.running("app"), what="the pod's container running")
        assert list(runtime.sandboxes) == [left]
        assert runtime.count("RunPodSandbox") == 1  # the killed agent's only
        (container,) = runtime.running("app")
        assert runtime.container_sandbox[container.id] == left
    finally:
        await node.stop()
