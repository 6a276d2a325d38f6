"""An agent stopped (SIGTERM) while containerd starts a pod's sandbox: the sandbox is finished,
not abandoned half-made (a RunPodSandbox cancelled while its shim starts can leave containerd
1.6 a shim that serves nothing and that nothing ever stops), the agent still exits within
the runtime request timeout, and the next agent runs the pod in that sandbox."""

from __future__ import annotations

import asyncio
import time

from pykubelet.tools.leaks import alive_on
from pykubelet.tools.shim_checks import orphan_shims, running_shims, socket_of
from tests.bed.cancelled_sandboxes import processes, wait_for_shim
from tests.runtime.conftest import ENDPOINT, NODE, AgentProcess, phase, pod_manifest, sandboxes_of, \
    write_manifest

REQUEST_TIMEOUT = 20  # seconds: the agent's --runtime-request-timeout, what bounds its stop


async def new_orphan_shims(before: set[int]) -> list[str]:
    """Shims of the test's containerd that serve none of its sandboxes or containers, and that
    were not there before the test (`before`: their pids)."""
    shims = [s for s in await asyncio.to_thread(running_shims) if s.pid not in before]
    alive = await alive_on([ENDPOINT])
    return [f"{leak.what} {leak.owner}" for leak in orphan_shims(shims, alive, {socket_of(ENDPOINT)})]


async def test_a_sandbox_being_created_when_the_agent_stops_is_finished_and_used_by_the_next(cri, tmp_path,
                                                                                             manifests):
    socket = socket_of(ENDPOINT)
    shims_before = {s.pid for s in await asyncio.to_thread(running_shims)}
    agent = AgentProcess(tmp_path, manifests, "--runtime-request-timeout", f"{REQUEST_TIMEOUT}s").start()
    try:
        starting = asyncio.ensure_future(asyncio.to_thread(wait_for_shim, socket, False, processes(), 30))
        write_manifest(manifests, "midway", pod_manifest("midway", "sleep 3600"))
        assert await starting, f"containerd never started the pod's shim\n{agent.describe()}"

        began = time.monotonic()
        assert agent.stop(timeout=REQUEST_TIMEOUT + 10) == 0, agent.describe()
        assert time.monotonic() - began < REQUEST_TIMEOUT + 5, "the stop outlived the runtime request timeout"
        # The sandbox the agent was creating is there, whole; no shim serves nothing.
        sandboxes = await sandboxes_of(cri, f"midway-{NODE}")
        assert len(sandboxes) == 1, f"the sandbox being created was abandoned: {sandboxes}"
        sandbox = sandboxes[0]
        assert await new_orphan_shims(shims_before) == []

        agent.start()
        await agent.wait_pod(f"midway-{NODE}", lambda p: phase(p) == "Running", 30, "Running after the restart")
        assert [s.id for s in await sandboxes_of(cri, f"midway-{NODE}")] == [sandbox.id], \
            "the next agent made another sandbox instead of using the finished one"
        assert await new_orphan_shims(shims_before) == []
    finally:
        agent.shutdown()
