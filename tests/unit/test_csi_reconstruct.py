"""An agent restarted over the disk an earlier one left: its CSI volumes found again (PVs, block
PVs, inline volumes, stagings), set up again for a pod still here, and unpublished and unstaged
for a pod that went meanwhile, once the driver is registered, backing off while it refuses; the
pod's files stay until then. A restart is a fresh CsiPodVolumes over the same root directory."""

from __future__ import annotations

import os

import grpc
import pytest

from pykubelet.api.pod import Pod
from pykubelet.volumes.claim_model import parse_volume
from pykubelet.volumes.csi import paths
from pykubelet.volumes.csi.drivers import Driver, DriverRegistry
from pykubelet.volumes.csi.inline import CsiInlineSource
from pykubelet.volumes.csi.node_client import Capability
from pykubelet.volumes.csi.operations import CsiNodeOperations
from pykubelet.volumes.csi.pod_volumes import CsiPodVolumes
from pykubelet.volumes.csi.pv_setup import CsiPersistentVolumes
from pykubelet.volumes.csi.reconstruct import scan
from tests.unit.csi_fakes import FakeApi, FakeNodeDriver, served_node_driver
from tests.fakes.clock import ManualClock

DRIVER = "hostpath.csi.k8s.io"


def pv(block: bool = False) -> object:
    return parse_volume({"metadata": {"name": "pvc-1"}, "spec": {
        "accessModes": ["ReadWriteOnce"], "claimRef": {"uid": "c"}, "volumeMode": "Block" if block else "Filesystem",
        "csi": {"driver": DRIVER, "volumeHandle": "vol-1"}}})


def pod(uid: str) -> Pod:
    return Pod(name=f"web-{uid}", namespace="default", uid=uid, containers=(), raw={"spec": {}})


async def cleaned(agent: CsiPodVolumes, known: set[str]) -> set[str]:
    """A housekeeping pass's CSI work, waited for (it runs in tasks of its own); the pods still holding a volume."""
    await agent.clean_up(known)
    await agent.settle()
    return agent.holders()


class Bed:
    def __init__(self, root: str, socket: str, node: FakeNodeDriver):
        self.root, self.socket, self.node = root, socket, node
        self.api = FakeApi()
        self.api.put(f"/apis/storage.k8s.io/v1/csidrivers/{DRIVER}",
                     {"spec": {"attachRequired": False, "volumeLifecycleModes": ["Persistent", "Ephemeral"]}})
        self.clock = ManualClock()
        self.agents: list[CsiPodVolumes] = []

    def agent(self, registered: bool = True) -> CsiPodVolumes:
        """A fresh agent over the root directory (a restart)."""
        drivers = DriverRegistry()
        if registered:
            self.register(drivers)
        agent = CsiPodVolumes(CsiPersistentVolumes(CsiNodeOperations(self.kubelet, "node1", drivers), self.api.get),
                              self.api.get, self.clock)
        self.agents.append(agent)
        return agent

    def register(self, drivers: DriverRegistry) -> None:
        drivers.add(Driver(DRIVER, self.socket, (1, 0, 0)))

    @property
    def kubelet(self) -> str:
        return os.path.join(self.root, "kubelet")

    def volume_dir(self, uid: str, name: str = "pvc-1") -> str:
        return f"{self.kubelet}/pods/{uid}/volumes/kubernetes.io~csi/{name}"

    def staging(self) -> str:
        return paths.global_mount_path(self.kubelet, DRIVER, "vol-1")

    def calls(self, method: str) -> list[tuple[str, str]]:
        return [(r.volume_id, getattr(r, "target_path", "") or r.staging_target_path)
                for r in self.node.calls(method)]


@pytest.fixture
async def bed():
    node = FakeNodeDriver(capabilities=(Capability.STAGE_UNSTAGE_VOLUME,))
    async with served_node_driver(node, DRIVER) as served:
        bed = Bed(served.root, served.socket, node)
        yield bed
        for agent in bed.agents:
            await agent.stop()


async def test_a_pod_still_here_after_a_restart_gets_its_volume_staged_and_published_again(bed):
    first = bed.agent()
    path = await first.set_up_pv(pod("u1"), "data", "data", pv(), read_only=False)

    second = bed.agent()
    await second.reconstruct()
    assert second.holders() == {"u1"} and second.in_use("u1") == []  # no pod volume name known yet
    assert await cleaned(second, {"u1"}) == {"u1"} and bed.node.calls("NodeUnpublishVolume") == []

    assert await second.set_up_pv(pod("u1"), "data", "data", pv(), read_only=False) == path
    # As the kubelet with a volume it is not sure of: both steps again (both idempotent).
    assert bed.calls("NodeStageVolume") == [("vol-1", bed.staging())] * 2
    assert bed.calls("NodePublishVolume") == [("vol-1", path)] * 2
    [in_use] = second.in_use("u1")
    assert (in_use.volume, in_use.claim) == ("data", "data")

    assert await second.unpublish("u1", "default/web-u1")
    assert bed.calls("NodeUnpublishVolume") == [("vol-1", path)]
    assert bed.calls("NodeUnstageVolume") == [("vol-1", bed.staging())]


async def test_a_pod_deleted_while_the_agent_was_down_is_unpublished_once_its_driver_registers(bed):
    first = bed.agent()
    path = await first.set_up_pv(pod("u1"), "data", "data", pv(), read_only=False)

    second = bed.agent(registered=False)  # the driver's pod registers after the agent starts
    await second.reconstruct()
    assert await cleaned(second, set()) == {"u1"}
    assert bed.node.calls("NodeUnpublishVolume") == [] and os.path.isdir(path)  # nothing removed meanwhile
    assert os.path.isfile(f"{bed.volume_dir('u1')}/vol_data.json")

    bed.register(second.persistent.operations.drivers)
    bed.clock.now += 0.1  # no back-off: an unregistered driver is asked for as soon as it is there
    assert await cleaned(second, set()) == set()
    assert bed.calls("NodeUnpublishVolume") == [("vol-1", path)]
    assert bed.calls("NodeUnstageVolume") == [("vol-1", bed.staging())]
    assert not os.path.exists(bed.volume_dir("u1")) and not os.path.exists(os.path.dirname(bed.staging()))


async def test_of_two_pods_sharing_a_staging_the_deleted_one_is_unpublished_and_the_staging_kept(bed):
    first = bed.agent()
    await first.set_up_pv(pod("u1"), "data", "data", pv(), read_only=False)
    await first.set_up_pv(pod("u2"), "data", "data", pv(), read_only=False)

    second = bed.agent()
    await second.reconstruct()
    assert await cleaned(second, {"u2"}) == {"u2"}
    assert [t for _, t in bed.calls("NodeUnpublishVolume")] == [f"{bed.volume_dir('u1')}/mount"]
    assert bed.node.calls("NodeUnstageVolume") == []

    assert await second.unpublish("u2", "default/web-u2")
    assert bed.calls("NodeUnstageVolume") == [("vol-1", bed.staging())]


async def test_a_staging_left_without_pods_is_unstaged(bed):
    first = bed.agent()
    await first.set_up_pv(pod("u1"), "data", "data", pv(), read_only=False)
    await first.persistent.operations.unpublish("u1", "pvc-1")  # the agent died before unstaging

    second = bed.agent()
    found = await second.reconstruct()
    assert found.volumes == () and [s.path for s in found.stagings] == [bed.staging()]
    assert await cleaned(second, set()) == set()
    assert bed.calls("NodeUnstageVolume") == [("vol-1", bed.staging())]


async def test_a_driver_refusing_to_unpublish_is_asked_again_with_back_off_and_the_files_kept(bed):
    first = bed.agent()
    path = await first.set_up_pv(pod("u1"), "data", "data", pv(), read_only=False)
    bed.node.fail["NodeUnpublishVolume"] = grpc.StatusCode.FAILED_PRECONDITION

    assert not await first.unpublish("u1", "default/web-u1")  # the pod's own teardown
    assert await cleaned(first, set()) == {"u1"}  # the pod is gone: housekeeping's turn
    assert len(bed.node.calls("NodeUnpublishVolume")) == 2
    assert await cleaned(first, set()) == {"u1"}
    assert len(bed.node.calls("NodeUnpublishVolume")) == 2  # backing off
    bed.clock.now += 0.6
    await cleaned(first, set())
    assert len(bed.node.calls("NodeUnpublishVolume")) == 3
    bed.clock.now += 0.6
    await cleaned(first, set())
    assert len(bed.node.calls("NodeUnpublishVolume")) == 3  # the back-off doubled
    assert os.path.isdir(path) and os.path.isfile(f"{bed.volume_dir('u1')}/vol_data.json")

    del bed.node.fail["NodeUnpublishVolume"]
    bed.clock.now += 0.6
    assert await cleaned(first, set()) == set()
    assert not os.path.exists(bed.volume_dir("u1")) and len(bed.node.calls("NodeUnstageVolume")) == 1


async def test_a_block_volume_is_found_by_its_publish_path_and_torn_down(bed):
    first = bed.agent()
    await first.set_up_pv(pod("u1"), "data", "data", pv(block=True), read_only=False)
    devices = f"{bed.kubelet}/plugins/kubernetes.io/csi/volumeDevices"
    os.unlink(f"{bed.kubelet}/pods/u1/volumeDevices/kubernetes.io~csi/pvc-1")  # the agent died unmapping it

    second = bed.agent()
    found = await second.reconstruct()
    assert [(v.pod_uid, v.spec_name, v.block) for v in found.volumes] == [("u1", "pvc-1", True)]
    assert await cleaned(second, set()) == set()
    assert bed.calls("NodeUnpublishVolume") == [("vol-1", f"{devices}/publish/pvc-1/u1")]
    assert bed.calls("NodeUnstageVolume") == [("vol-1", f"{devices}/staging/pvc-1")]
    assert not os.path.exists(f"{devices}/pvc-1")


async def test_an_inline_volume_is_unpublished_with_its_pod_volume_id(bed):
    first = bed.agent()
    await first.set_up_inline(pod("u1"), CsiInlineSource("scratch", DRIVER))

    second = bed.agent()
    await second.reconstruct()
    assert await cleaned(second, set()) == set()
    assert bed.calls("NodeUnpublishVolume") == [(paths.inline_volume_handle("u1", "scratch"),
                                                 f"{bed.volume_dir('u1', 'scratch')}/mount")]
    assert bed.node.calls("NodeUnstageVolume") == []


def test_an_unreadable_volume_is_reported_and_not_guessed_at(tmp_path):
    directory = tmp_path / "pods" / "u1" / "volumes" / "kubernetes.io~csi"
    (directory / "pvc-1").mkdir(parents=True)
    (directory / "pvc-2").mkdir()
    (directory / "pvc-2" / "vol_data.json").write_text("{not json")
    found = scan(str(tmp_path))
    assert found.volumes == () and len(found.problems) == 2
    assert "no vol_data.json in" in found.problems[0] and "failed to parse volume data file" in found.problems[1]
