"""restartPolicy, the kubelet's crash back-off, dead sandboxes, and garbage collection."""

from __future__ import annotations

from datetime import datetime

from pykubelet.cri.v1 import api_pb2 as api
from tests.helpers import wait_for
from tests.runtime.conftest import NODE, containers_of, main_status, phase, pod_manifest, sandboxes_of, write_manifest


def _started(status: dict) -> float:
    return datetime.fromisoformat(status["state"]["terminated"]["startedAt"].replace("Z", "+00:00")).timestamp()


async def test_crashing_container_restarts_with_growing_backoff(agent, cri, manifests):
    write_manifest(manifests, "crash", pod_manifest("crash", "echo crashing; exit 1"))
    name = f"crash-{NODE}"
    starts: dict[int, float] = {}

    async def record_starts():
        for c in await containers_of(cri, name):
            if c.metadata.attempt not in starts:
                starts[c.metadata.attempt] = c.created_at / 1e9
        return len(starts) >= 4
    await wait_for(record_starts, 60, "four runs of the crashing container", interval=0.05,
                   describe=agent.describe)

    gaps = [starts[i + 1] - starts[i] for i in range(3)]
    assert gaps[0] < 5, f"the first restart should be immediate, gaps {gaps}"
    assert gaps[1] >= 9.5, f"the second restart should wait the 10 s back-off, gaps {gaps}"
    assert gaps[2] >= 19.5, f"the third restart should wait 20 s, gaps {gaps}"

    pod = await agent.wait_pod(name, lambda p: main_status(p)["restartCount"] >= 3, 10, "restartCount 3")
    status = main_status(pod)
    assert phase(pod) == "Running"
    if "waiting" in status["state"]:  # between runs: the kubelet's wording
        assert status["state"]["waiting"]["reason"] == "CrashLoopBackOff"
        assert "back-off" in status["state"]["waiting"]["message"]
    assert status["lastState"]["terminated"]["exitCode"] == 1
    # Garbage collection keeps the newest dead instance only (for logs --previous).
    assert len(await containers_of(cri, name)) <= 2


async def test_restart_policy_never_keeps_the_exit_code(agent, cri, manifests):
    write_manifest(manifests, "once", pod_manifest("once", "echo done; exit 3", restart_policy="Never"))
    name = f"once-{NODE}"
    pod = await agent.wait_pod(name, lambda p: phase(p) == "Failed", 30, "phase Failed")
    terminated = main_status(pod)["state"]["terminated"]
    assert terminated["exitCode"] == 3 and terminated["reason"] == "Error"
    assert main_status(pod)["restartCount"] == 0

    async def sandbox_stopped():
        (sandbox,) = await sandboxes_of(cri, name)
        return sandbox.state == api.SANDBOX_NOTREADY
    await wait_for(sandbox_stopped, 10, "the finished pod's sandbox to be stopped", describe=agent.describe)
    # Still one container, and still the same one, after several more syncs and relists.
    await agent.wait_pod(name, lambda p: p is not None, 2, "listed")
    containers = await containers_of(cri, name)
    assert len(containers) == 1 and containers[0].state == api.CONTAINER_EXITED
    assert main_status(pod)["containerID"].endswith(containers[0].id)


async def test_restart_policy_on_failure_succeeds_on_exit_zero(agent, cri, manifests):
    write_manifest(manifests, "job", pod_manifest("job", "echo ok", restart_policy="OnFailure"))
    pod = await agent.wait_pod(f"job-{NODE}", lambda p: phase(p) == "Succeeded", 30, "phase Succeeded")
    terminated = main_status(pod)["state"]["terminated"]
    assert terminated["exitCode"] == 0 and terminated["reason"] == "Completed"


async def test_dead_sandbox_is_recreated_and_the_container_restarted(agent, cri, manifests):
    write_manifest(manifests, "phoenix", pod_manifest("phoenix", "sleep 3600"))
    name = f"phoenix-{NODE}"
    await agent.wait_pod(name, lambda p: phase(p) == "Running", 30, "Running")
    (sandbox,) = await sandboxes_of(cri, name)

    await cri.stop_pod_sandbox(sandbox.id)  # what a crashed pause process or a reboot looks like

    async def new_sandbox_ready():
        ready = [s for s in await sandboxes_of(cri, name) if s.state == api.SANDBOX_READY]
        return ready and ready[0].id != sandbox.id and ready[0].metadata.attempt == 1
    await wait_for(new_sandbox_ready, 30, "a new sandbox with attempt 1", describe=agent.describe)
    # Restarted at least once: a restart the agent tried in the sandbox as it was dying (it saw the
    # container exit first) counts too, as with the kubelet, and then waits out its back-off.
    def restarted_and_running(p):
        return main_status(p)["restartCount"] >= 1 and "running" in main_status(p)["state"]
    pod = await agent.wait_pod(name, restarted_and_running, 30, "the container restarted and running again")
    (running,) = [c for c in await containers_of(cri, name) if c.state == api.CONTAINER_RUNNING]
    assert running.pod_sandbox_id != sandbox.id and main_status(pod)["containerID"].endswith(running.id)
