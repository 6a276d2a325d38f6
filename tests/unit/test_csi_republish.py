"""requiresRepublish as the kubelet does it: a failed republish is a Warning event on the pod
naming the volume and the driver's error (FailedMount; FailedMapVolume for a block volume), the
volume is left published, and it is tried again once its back-off ends; block volumes are
republished too (NodePublishVolume again, the staging kept)."""

from __future__ import annotations

import asyncio
import os

import grpc
import pytest

from pykubelet.api.pod import Pod
from pykubelet.volumes.claim_model import parse_volume
from pykubelet.volumes.csi.node_client import Capability
from pykubelet.volumes.csi.operations import CsiNodeOperations
from pykubelet.volumes.csi.pod_volumes import CsiPodVolumes
from pykubelet.volumes.csi.pv_setup import CsiPersistentVolumes
from tests.helpers import wait_for
from tests.unit.csi_fakes import FakeApi, FakeNodeDriver, served_node_driver
from tests.fakes.clock import ManualClock

DRIVER = "hostpath.csi.k8s.io"
POD = Pod(name="web", namespace="shop", uid="u1", containers=(), raw={"spec": {}})
REFUSED = "rpc error: code = InvalidArgument desc = NodePublishVolume refused"


def pv(block: bool = False) -> object:
    return parse_volume({"metadata": {"name": "pvc-1"}, "spec": {
        "accessModes": ["ReadWriteOnce"], "claimRef": {"uid": "c"}, "volumeMode": "Block" if block else "Filesystem",
        "csi": {"driver": DRIVER, "volumeHandle": "vol-1"}}})


class Recorder:
    """The agent's EventRecorder, as the republish sees it."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str]] = []

    def record(self, ref: dict[str, str], kind: str, reason: str, message: str) -> None:
        self.events.append((f"{ref['namespace']}/{ref['name']}/{ref['uid']}", kind, reason, message))


@pytest.fixture
async def bed():
    node = FakeNodeDriver(capabilities=(Capability.STAGE_UNSTAGE_VOLUME,))
    async with served_node_driver(node, DRIVER) as served:
        api = FakeApi()
        api.put(f"/apis/storage.k8s.io/v1/csidrivers/{DRIVER}", {"spec": {
            "attachRequired": False, "requiresRepublish": True, "volumeLifecycleModes": ["Persistent"]}})
        clock, recorder = ManualClock(), Recorder()
        ops = CsiNodeOperations(os.path.join(served.root, "kubelet"), "node1", served.drivers)
        volumes = CsiPodVolumes(CsiPersistentVolumes(ops, api.get), api.get, clock)
        volumes.republisher.recorder = recorder
        yield node, volumes, clock, recorder, lambda: CsiPodVolumes(CsiPersistentVolumes(ops, api.get), api.get)


async def test_a_failed_republish_is_a_failed_mount_event_and_is_retried_when_its_back_off_ends(bed):
    node, volumes, clock, recorder, _ = bed
    path = await volumes.set_up_pv(POD, "data", "data", pv(), read_only=False)
    node.fail["NodePublishVolume"] = grpc.StatusCode.INVALID_ARGUMENT

    await volumes.republish()
    assert recorder.events == [("shop/web/u1", "Warning", "FailedMount",
                                f'MountVolume.SetUp failed for volume "pvc-1" : {REFUSED}')]
    assert os.path.isdir(path) and [v.target_path for v in volumes.in_use("u1")] == [path]  # not unmounted

    await volumes.republish(periodic=False)
    await volumes.republish()  # a period does not cut the back-off short
    assert len(node.calls("NodePublishVolume")) == 2 and len(recorder.events) == 1

    clock.now += 0.6  # the first back-off (0.5 s) is over: due again, before the next period
    assert volumes.republisher.next_retry_in() == 0.0
    await volumes.republish(periodic=False)
    assert len(node.calls("NodePublishVolume")) == 3 and len(recorder.events) == 2
    clock.now += 0.6
    await volumes.republish(periodic=False)
    assert len(node.calls("NodePublishVolume")) == 3  # the back-off doubled

    del node.fail["NodePublishVolume"]
    clock.now += 0.6
    await volumes.republish(periodic=False)
    assert len(node.calls("NodePublishVolume")) == 4 and len(recorder.events) == 2
    await volumes.republish(periodic=False)  # done: nothing due until the next period
    assert len(node.calls("NodePublishVolume")) == 4 and volumes.republisher.next_retry_in() is None
    await volumes.republish()
    assert len(node.calls("NodePublishVolume")) == 5


async def test_a_block_volume_is_republished_at_its_publish_path_and_its_failure_is_a_failed_map_event(bed):
    node, volumes, _, recorder, _ = bed
    device = await volumes.set_up_pv(POD, "data", "data", pv(block=True), read_only=False)
    await volumes.republish()
    [first, again] = node.calls("NodePublishVolume")
    assert again.target_path == first.target_path and again.volume_capability.HasField("block")
    assert len(node.calls("NodeStageVolume")) == 1  # staged once: the kubelet keeps the device set up

    node.fail["NodePublishVolume"] = grpc.StatusCode.INVALID_ARGUMENT
    await volumes.republish()
    assert recorder.events == [("shop/web/u1", "Warning", "FailedMapVolume",
                                f'MapVolume.MapPodDevice failed for volume "pvc-1" : {REFUSED}')]
    assert os.path.islink(device) and os.path.exists(first.target_path)  # the pod keeps its device


async def test_the_republish_loop_reports_failures_to_the_agents_recorder(bed):
    node, _, _, _, agent_clocked = bed
    volumes = agent_clocked()  # the loop's own time, not the test's clock
    await volumes.set_up_pv(POD, "data", "data", pv(), read_only=False)
    node.fail["NodePublishVolume"] = grpc.StatusCode.INVALID_ARGUMENT
    agents = Recorder()
    loop = asyncio.create_task(volumes.run_republish(agents, period=0.05))
    try:
        await wait_for(lambda: agents.events, 5, "the failed republish reported")
        assert agents.events[0][2:] == ("FailedMount", f'MountVolume.SetUp failed for volume "pvc-1" : {REFUSED}')
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
