"""The cgroup driver is settled against the machine and the runtime before any pod is touched.
This machine runs no systemd as its init system and its containerds use cgroupfs. Containerd 1.6
has no RuntimeConfig call: an agent told `--cgroup-driver systemd` stops at once with one error
that says why, and starts no pod. Containerd 2.x answers RuntimeConfig, and as with the kubelet
its driver wins: the same agent runs its pods with cgroupfs."""

from __future__ import annotations

import json
import subprocess

import pytest

from pykubelet.cri import errors
from tests.runtime.conftest import NODE, AgentProcess, phase, pod_manifest, write_manifest


async def has_runtime_config(cri) -> bool:
    try:
        await cri.runtime_config()
    except errors.Unimplemented:
        return False
    return True


async def test_the_systemd_driver_without_systemd_is_one_clear_error_at_start(cri, tmp_path, manifests):
    if await has_runtime_config(cri):
        pytest.skip("the runtime names its driver (RuntimeConfig): --cgroup-driver does not apply")
    write_manifest(manifests, "never-started", pod_manifest("never-started", "sleep 600"))
    agent = AgentProcess(tmp_path, manifests, "--cgroup-driver", "systemd", network_state=None).start()
    try:
        code = agent.proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        agent.shutdown()
        raise AssertionError(f"the agent kept running:\n{agent.log()[-3000:]}") from None
    log = agent.log()
    assert code == 1, log[-3000:]
    errors_logged = [line for line in log.splitlines() if "cgroupDriver is systemd" in line]
    assert len(errors_logged) == 1 and "not the init system" in errors_logged[0] and "cgroupfs" in errors_logged[0], \
        log[-3000:]
    assert "should be updated to support RuntimeConfig" in log, log[-3000:]
    assert not [s for s in await cri.list_pod_sandbox() if s.metadata.name == "never-started"]


async def test_the_runtimes_reported_driver_replaces_cgroup_driver(cri, tmp_path, manifests):
    if not await has_runtime_config(cri):
        pytest.skip("the runtime has no RuntimeConfig call (containerd before 2.0)")
    write_manifest(manifests, "driver", pod_manifest("driver", "sleep 600"))
    agent = AgentProcess(tmp_path, manifests, "--cgroup-driver", "systemd").start()
    try:
        await agent.wait_pod(f"driver-{NODE}", lambda p: phase(p) == "Running", 60, "Running under cgroupfs")
        log = agent.log()
        assert "Using cgroup driver setting received from the CRI runtime" in log and "cgroupfs" in log, log[-3000:]
        sandbox = [s for s in await cri.list_pod_sandbox() if s.metadata.name == f"driver-{NODE}"][0]
        info = json.loads((await cri.pod_sandbox_status(sandbox.id, verbose=True)).info["info"])
        # A cgroupfs path (/kubepods/besteffort/pod<uid>/<id>), not systemd's slice:prefix:name.
        cgroups_path = info["runtimeSpec"]["linux"]["cgroupsPath"]
        assert cgroups_path.startswith("/") and ".slice" not in cgroups_path, cgroups_path
    finally:
        agent.shutdown()
