"""A node whose disk fills up: DiskPressure in the kubelet's words, clear errors, no crash, the
running (static, so never evicted) pods untouched, and all of it undone once space returns and
the pressure transition period has passed.

The agent's root dir and its pods' log dir live on a small filesystem of their own (a loop-
mounted image), which the test fills and then empties.
"""

from __future__ import annotations

import errno
import os
import pathlib
import subprocess
import time

import pytest

from tests.cluster.conftest import cluster_sh, node_condition, node_object, wait_ready
from tests.helpers import wait_for
from tests.runtime.conftest import NODE, AgentProcess, main_status, phase, pod_manifest, write_manifest

FS_MIB = 96
TRANSITION_SECONDS = 20  # evictionPressureTransitionPeriod, short for the test (the kubelet's default: 5m)
MONITORING_PERIOD = 10  # the eviction manager looks every 10 s


@pytest.fixture
def small_fs(tmp_path: pathlib.Path):
    image, mount = tmp_path / "disk.img", tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["truncate", "-s", f"{FS_MIB}M", str(image)], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", str(image)], check=True)
    subprocess.run(["mount", "-o", "loop", str(image), str(mount)], check=True)
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(fs: pathlib.Path) -> list[pathlib.Path]:
    """Write until the filesystem has no room left, not even for a directory.

    One dd is not enough: ext4 gives back the blocks it held for delayed allocation once the data
    is on disk, and a new directory fits in one of them. So write again after each sync, until a
    directory cannot be made."""
    fillers: list[pathlib.Path] = []
    deadline = time.monotonic() + 60
    while True:
        filler = fs / f"filler-{len(fillers)}"
        subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=4k"], capture_output=True)  # stops at ENOSPC
        fillers.append(filler)
        os.sync()
        try:
            (fs / "probe").mkdir()
        except OSError as e:
            if e.errno == errno.ENOSPC:
                return fillers
            raise
        (fs / "probe").rmdir()
        assert time.monotonic() < deadline, f"{fs} still has room after {len(fillers)} fillers"


async def test_a_full_disk_is_disk_pressure_and_everything_recovers_when_space_returns(cluster, cri, tmp_path,
                                                                                      small_fs):
    kubeconfig = tmp_path / "node.kubeconfig"
    cluster_sh("node-kubeconfig", NODE, str(kubeconfig), timeout=60)
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    # The root dir's filesystem is the one under test; the machine's shared disk (images) is not.
    agent = AgentProcess(tmp_path, manifests, "--kubeconfig", str(kubeconfig), "--root-dir", str(small_fs / "root"),
                         "--pod-logs-dir", str(small_fs / "logs"),
                         "--eviction-hard=nodefs.available<10%,nodefs.inodesFree<5%",
                         f"--eviction-pressure-transition-period={TRANSITION_SECONDS}s", network_state=None).start()
    try:
        await wait_ready(agent)
        write_manifest(manifests, "before", pod_manifest("before", "while true; do echo tick; sleep 0.2; done"))
        before = await agent.wait_pod(f"before-{NODE}", lambda p: phase(p) == "Running", 30, "Running")

        fillers = fill(small_fs)
        pressure = await wait_for(lambda: (c := node_condition(node_object(), "DiskPressure")).get("status") == "True"
                                  and c, 30, "DiskPressure", describe=agent.describe)
        assert pressure["reason"] == "KubeletHasDiskPressure"
        write_manifest(manifests, "during", pod_manifest("during", "sleep 3600"))
        # The new pod cannot get its directories on the full disk: it waits, saying why.
        await wait_for(lambda: "no space left on device" in agent.log().lower(), 30,
                       "an error naming the full disk", describe=agent.describe)
        assert agent.proc.poll() is None, "the agent died on a full disk"

        for filler in fillers:
            filler.unlink()
        freed = time.monotonic()
        await wait_for(lambda: node_condition(node_object(), "DiskPressure").get("status") == "False",
                       TRANSITION_SECONDS + 40, "DiskPressure gone once space returns", describe=agent.describe)
        # The condition outlives the signal by the transition period, counted from the last pass
        # that saw the disk full (at most one monitoring period before the space returned).
        assert time.monotonic() - freed >= TRANSITION_SECONDS - MONITORING_PERIOD - 1
        await agent.wait_pod(f"during-{NODE}", lambda p: phase(p) == "Running", 60,
                             "the pod written during the pressure Running once space returns")
        status = main_status(agent.pods()[f"before-{NODE}"])
        assert (status["containerID"], status["restartCount"]) == (main_status(before)["containerID"], 0)
    finally:
        try:
            for path in manifests.iterdir():
                path.unlink()
            await wait_for(lambda: not (agent.pods() or {}), 60, "the test pods removed", describe=agent.describe)
        finally:
            agent.shutdown()  # whatever happened: an agent left running would serve the next tests' pods
