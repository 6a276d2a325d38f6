"""The cgroup driver is checked against the machine and the runtime before any pod is touched:
this machine's containerd uses cgroupfs and systemd is not its init system, so an agent told
`--cgroup-driver systemd` stops at once with one error that says why, and starts no pod."""

from __future__ import annotations

import subprocess

from tests.runtime.conftest import AgentProcess, pod_manifest, write_manifest


async def test_the_systemd_driver_without_systemd_is_one_clear_error_at_start(cri, tmp_path, manifests):
    write_manifest(manifests, "never-started", pod_manifest("never-started", "sleep 600"))
    agent = AgentProcess(tmp_path, manifests, "--cgroup-driver", "systemd", network_state=None).start()
    try:
        code = agent.proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        agent.shutdown()
        raise AssertionError(f"the agent kept running:\n{agent.log()[-3000:]}") from None
    log = agent.log()
    assert code == 1, log[-3000:]
    errors = [line for line in log.splitlines() if "cgroupDriver is systemd" in line]
    assert len(errors) == 1 and "not the init system" in errors[0] and "cgroupfs" in errors[0], log[-3000:]
    assert not [s for s in await cri.list_pod_sandbox() if s.metadata.name == "never-started"]
