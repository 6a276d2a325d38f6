"""A block CSI PersistentVolume (volumeMode Block) staged, published and linked for its pods at
the kubelet's volumeDevices paths, against a driver served in-process; torn down again; and the
container's volumeDevices turned into CRI devices."""

from __future__ import annotations

import contextlib
import os

import pytest

from pykubelet.api.pod import Pod, parse_pod
from pykubelet.runtime.env import ContainerConfigError
from pykubelet.pods.container_config import block_devices
from pykubelet.volumes.claim_model import parse_volume
from pykubelet.volumes.claim_volumes import ClaimMount
from pykubelet.volumes.csi import vol_data
from pykubelet.volumes.csi.block import CsiBlockVolumes
from pykubelet.volumes.csi.node_client import Capability
from pykubelet.volumes.csi.operations import CsiNodeOperations
from pykubelet.volumes.csi.v1 import csi_pb2 as csi
from tests.unit.csi_fakes import FakeApi, FakeNodeDriver, served_node_driver

DRIVER = "hostpath.csi.k8s.io"
PV = parse_volume({"metadata": {"name": "pvc-1"}, "spec": {
    "accessModes": ["ReadWriteOnce"], "volumeMode": "Block", "claimRef": {"uid": "c"},
    "csi": {"driver": DRIVER, "volumeHandle": "vol-1", "volumeAttributes": {"a": "1"}}}})


def pod(uid: str) -> Pod:
    return Pod(name=f"db-{uid}", namespace="default", uid=uid, containers=(), raw={"spec": {}})


@contextlib.asynccontextmanager
async def _bed(capabilities: tuple[int, ...]):
    node = FakeNodeDriver(capabilities=capabilities)
    async with served_node_driver(node, DRIVER) as served:
        api = FakeApi()
        api.put(f"/apis/storage.k8s.io/v1/csidrivers/{DRIVER}", {"spec": {"attachRequired": False}})
        ops = CsiNodeOperations(os.path.join(served.root, "kubelet"), "node1", served.drivers)
        yield node, CsiBlockVolumes(ops, api.get), served.root


@pytest.fixture
async def staging_driver():
    async with _bed((Capability.STAGE_UNSTAGE_VOLUME,)) as bed:
        yield bed


async def test_a_block_volume_is_staged_published_and_linked_at_the_kubelets_paths(staging_driver):
    node, volumes, root = staging_driver
    devices = f"{root}/kubelet/plugins/kubernetes.io/csi/volumeDevices"

    mapped = await volumes.set_up(pod("u1"), PV, read_only=True)

    [stage] = node.calls("NodeStageVolume")
    assert stage.staging_target_path == f"{devices}/staging/pvc-1" and stage.volume_capability.HasField("block")
    [publish] = node.calls("NodePublishVolume")
    assert (publish.target_path, publish.staging_target_path, publish.readonly) == (
        f"{devices}/publish/pvc-1/u1", f"{devices}/staging/pvc-1", True)
    assert publish.volume_capability.HasField("block") and not publish.volume_capability.HasField("mount")
    assert publish.volume_capability.access_mode.mode == csi.VolumeCapability.AccessMode.SINGLE_NODE_WRITER
    assert dict(publish.volume_context) == {"a": "1"}
    assert mapped.device_path == f"{root}/kubelet/pods/u1/volumeDevices/kubernetes.io~csi/pvc-1"
    assert os.readlink(mapped.device_path) == publish.target_path == mapped.publish_path
    assert vol_data.load(f"{devices}/pvc-1/data") == vol_data.block_data("pvc-1", DRIVER, "vol-1", "node1")


async def test_two_pods_share_the_staging_which_goes_with_the_last_and_its_files(staging_driver):
    node, volumes, root = staging_driver
    first = await volumes.set_up(pod("u1"), PV, read_only=False)
    await volumes.set_up(pod("u2"), PV, read_only=False)
    assert len(node.calls("NodeStageVolume")) == 1 and len(node.calls("NodePublishVolume")) == 2

    await volumes.tear_down("u1", "pvc-1")
    assert not os.path.lexists(first.device_path) and node.calls("NodeUnstageVolume") == []
    [unpublish] = node.calls("NodeUnpublishVolume")
    assert (unpublish.volume_id, unpublish.target_path) == ("vol-1", first.publish_path)

    await volumes.tear_down("u2", "pvc-1")
    [unstage] = node.calls("NodeUnstageVolume")
    assert unstage.staging_target_path.endswith("/volumeDevices/staging/pvc-1")
    assert sorted(os.listdir(f"{root}/kubelet/plugins/kubernetes.io/csi/volumeDevices")) == ["publish", "staging"]
    assert os.listdir(f"{root}/kubelet/plugins/kubernetes.io/csi/volumeDevices/publish") == []


async def test_a_driver_that_does_not_stage_publishes_only():
    async with _bed(()) as (node, volumes, _):
        mapped = await volumes.set_up(pod("u1"), PV, read_only=False)
        await volumes.tear_down("u1", "pvc-1")
    assert node.calls("NodeStageVolume") == [] and node.calls("NodeUnstageVolume") == []
    assert [r.target_path for r in node.calls("NodeUnpublishVolume")] == [mapped.publish_path]


def container(devices: list) -> object:
    return parse_pod({"metadata": {"name": "db", "uid": "u1"}, "spec": {"containers": [
        {"name": "c", "image": "x", "volumeDevices": devices}]}}, where="test").containers[0]


def test_a_containers_volume_devices_are_its_block_claims_with_their_permissions():
    claims = {"data": ClaimMount("/root/pods/u1/volumeDevices/kubernetes.io~csi/pvc-1", False, block=True),
              "logs": ClaimMount("/root/pods/u1/volumeDevices/kubernetes.io~csi/pvc-2", True, block=True)}
    devices = block_devices(container([{"name": "data", "devicePath": "/dev/xvda"},
                                       {"name": "logs", "devicePath": "/dev/xvdb"}]), claims)
    assert [(d.container_path, d.host_path, d.permissions) for d in devices] == [
        ("/dev/xvda", claims["data"].host_path, "mrw"), ("/dev/xvdb", claims["logs"].host_path, "r")]


@pytest.mark.parametrize("device, error", [
    ({"name": "data", "devicePath": "dev/xvda"}, "error DevicePath `dev/xvda` must be an absolute path"),
    ({"name": "other", "devicePath": "/dev/xvda"}, "cannot find volume 'other' to pass into container 'c'"),
    ({"name": "dir", "devicePath": "/dev/xvda"}, "cannot find volume 'dir' to pass into container 'c'"),
])
def test_a_volume_device_that_cannot_be_given_fails_the_container(device, error):
    claims = {"data": ClaimMount("/dev-link", False, block=True), "dir": ClaimMount("/a/dir", False)}
    with pytest.raises(ContainerConfigError) as failed:
        block_devices(container([device]), claims)
    assert str(failed.value) == error
