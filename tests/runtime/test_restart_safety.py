"""The agent's death never stops a pod; a new agent adopts pods and cleans up vanished ones."""

from __future__ import annotations

import os
import signal

import pytest

from pykubelet.cri.v1 import api_pb2 as api
from tests.helpers import wait_for
from tests.runtime.conftest import NODE, containers_of, main_status, phase, pod_manifest, sandboxes_of, write_manifest


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
async def test_restarted_agent_adopts_running_pods_without_restarting_them(agent, cri, manifests, sig):
    write_manifest(manifests, "steady", pod_manifest("steady", "sleep 3600"))
    write_manifest(manifests, "doomed", pod_manifest("doomed", "sleep 3600"))
    steady, doomed = f"steady-{NODE}", f"doomed-{NODE}"
    for name in (steady, doomed):
        await agent.wait_pod(name, lambda p: phase(p) == "Running", 30, "Running")
    (before,) = await containers_of(cri, steady)

    agent.stop(sig)
    assert (await containers_of(cri, steady))[0].state == api.CONTAINER_RUNNING, "the agent's death stopped a pod"
    os.remove(manifests / "doomed.yaml")  # removed while no agent was watching

    agent.start()
    pod = await agent.wait_pod(steady, lambda p: phase(p) == "Running", 30, "adopted and Running")
    assert main_status(pod)["restartCount"] == 0
    assert main_status(pod)["containerID"] == f"containerd://{before.id}"

    async def doomed_cleaned_up():
        return not await containers_of(cri, doomed) and not await sandboxes_of(cri, doomed)
    await wait_for(doomed_cleaned_up, 20, "the pod whose manifest vanished to be cleaned up",
                   describe=agent.describe)
    (after,) = await containers_of(cri, steady)
    assert after.id == before.id and after.state == api.CONTAINER_RUNNING
    assert after.created_at == before.created_at
