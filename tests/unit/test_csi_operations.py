"""CSI volume operations against a driver served in-process: the kubelet's staging and publish
paths, the vol_data.json files it writes beside them, what the driver is told, and teardown
leaving nothing behind."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile

import grpc
import pytest

from pykubelet.volumes.csi import vol_data
from pykubelet.volumes.csi.drivers import Driver, DriverRegistry
from pykubelet.volumes.csi.node_client import Capability, CsiCallError, CsiNodeClient
from pykubelet.volumes.csi.operations import CsiNodeOperations, CsiOperationError, CsiVolume
from pykubelet.volumes.csi.v1 import csi_pb2 as csi
from pykubelet.volumes.csi.v1 import csi_pb2_grpc as csi_grpc
from tests.unit.csi_fakes import FakeNodeDriver, serve

DRIVER = "hostpath.csi.k8s.io"
HANDLE = "4f7a0d3e-volume"
UID = "8c1f5a4e-pod"
Mode = csi.VolumeCapability.AccessMode


@pytest.fixture
def root():
    directory = tempfile.mkdtemp(prefix="csi", dir="/tmp")  # short: unix socket paths are limited
    yield directory
    shutil.rmtree(directory)


async def _operations(root: str, node: FakeNodeDriver):
    socket = os.path.join(root, "csi.sock")
    server = await serve(socket, csi_grpc.add_NodeServicer_to_server, node)
    drivers = DriverRegistry()
    drivers.add(Driver(DRIVER, socket, (1, 0, 0)))
    return CsiNodeOperations(os.path.join(root, "kubelet"), "node1", drivers), server


@pytest.fixture
async def driver(root):
    node = FakeNodeDriver(capabilities=(Capability.STAGE_UNSTAGE_VOLUME, Capability.VOLUME_MOUNT_GROUP))
    ops, server = await _operations(root, node)
    yield node, ops
    await server.stop(None)


def volume(**changes) -> CsiVolume:
    fields = dict(spec_name="pvc-123", driver=DRIVER, volume_handle=HANDLE, access_mode="ReadWriteOnce",
                  fs_type="ext4", mount_options=("noatime",), volume_attributes={"storage.kubernetes.io/csiProvisionerIdentity": "p"},
                  publish_context={"device": "/dev/x"})
    fields.update(changes)
    return CsiVolume(**fields)


def read_json(path: str) -> tuple[dict[str, str], bytes]:
    with open(path, "rb") as f:
        raw = f.read()
    return json.loads(raw), raw


async def test_stage_uses_the_global_mount_path_and_records_the_volume(driver, root):
    node, ops = driver
    staging = await ops.stage(volume(), {"key": "stage-secret"}, fs_group=2000)

    sha = hashlib.sha256(HANDLE.encode()).hexdigest()
    assert staging == f"{root}/kubelet/plugins/kubernetes.io/csi/{DRIVER}/{sha}/globalmount"
    assert os.path.isdir(staging) and oct(os.stat(staging).st_mode & 0o777) == "0o750"
    data, raw = read_json(os.path.join(os.path.dirname(staging), "vol_data.json"))
    assert raw == f'{{"driverName":"{DRIVER}","volumeHandle":"{HANDLE}"}}\n'.encode()
    [request] = node.calls("NodeStageVolume")
    assert request.volume_id == HANDLE and request.staging_target_path == staging
    assert dict(request.secrets) == {"key": "stage-secret"}
    assert dict(request.publish_context) == {"device": "/dev/x"}
    assert dict(request.volume_context) == {"storage.kubernetes.io/csiProvisionerIdentity": "p"}
    assert request.volume_capability.mount.fs_type == "ext4"
    assert list(request.volume_capability.mount.mount_flags) == ["noatime"]
    assert request.volume_capability.mount.volume_mount_group == "2000"  # the driver has VOLUME_MOUNT_GROUP
    assert request.volume_capability.access_mode.mode == Mode.SINGLE_NODE_WRITER


async def test_publish_uses_the_pod_path_and_records_the_volume(driver, root):
    node, ops = driver
    staging = await ops.stage(volume(), {})
    published = await ops.publish(UID, volume(access_mode="ReadOnlyMany"), True, {"p": "publish-secret"},
                                  {"a": "b", "csi.storage.k8s.io/pod.name": "web"}, staging)

    target = f"{root}/kubelet/pods/{UID}/volumes/kubernetes.io~csi/pvc-123/mount"
    assert published.target_path == target and not published.fs_group_applied_by_driver
    assert oct(os.stat(os.path.dirname(target)).st_mode & 0o777) == "0o750"
    data, raw = read_json(os.path.join(os.path.dirname(target), "vol_data.json"))
    attachment = "csi-" + hashlib.sha256(f"{HANDLE}{DRIVER}node1".encode()).hexdigest()
    assert data == {"specVolID": "pvc-123", "volumeHandle": HANDLE, "driverName": DRIVER, "nodeName": "node1",
                    "attachmentID": attachment, "volumeLifecycleMode": "Persistent"}
    assert list(data) == sorted(data)  # Go's encoder: sorted keys
    [request] = node.calls("NodePublishVolume")
    assert (request.volume_id, request.target_path, request.staging_target_path) == (HANDLE, target, staging)
    assert request.readonly
    assert dict(request.secrets) == {"p": "publish-secret"}
    assert dict(request.volume_context) == {"a": "b", "csi.storage.k8s.io/pod.name": "web"}
    assert request.volume_capability.access_mode.mode == Mode.MULTI_NODE_READER_ONLY
    assert request.volume_capability.mount.volume_mount_group == ""  # no fsGroup given


async def test_unpublish_and_unstage_tell_the_driver_and_leave_nothing_behind(driver, root):
    node, ops = driver
    staging = await ops.stage(volume(), {})
    await ops.publish(UID, volume(), False, {}, {}, staging)

    await ops.unpublish(UID, "pvc-123")
    await ops.unstage(staging)

    [unpublish] = node.calls("NodeUnpublishVolume")
    assert (unpublish.volume_id, unpublish.target_path) == (HANDLE, f"{root}/kubelet/pods/{UID}/volumes/kubernetes.io~csi/pvc-123/mount")
    [unstage] = node.calls("NodeUnstageVolume")
    assert (unstage.volume_id, unstage.staging_target_path) == (HANDLE, staging)
    assert os.listdir(f"{root}/kubelet/pods/{UID}/volumes/kubernetes.io~csi") == []
    assert os.listdir(f"{root}/kubelet/plugins/kubernetes.io/csi/{DRIVER}") == []


async def test_teardown_of_what_was_never_set_up_asks_nothing(driver, root):
    node, ops = driver
    await ops.unpublish(UID, "pvc-123")
    await ops.unstage(ops.staging_path(volume()))
    assert node.requests == []


async def test_a_driver_that_does_not_stage_is_published_without_a_staging_path(root):
    node = FakeNodeDriver(capabilities=(Capability.SINGLE_NODE_MULTI_WRITER,))
    ops, server = await _operations(root, node)
    try:
        staging = await ops.stage(volume(), {})
        await ops.publish(UID, volume(access_mode="ReadWriteOncePod"), False, {}, {}, staging)
    finally:
        await server.stop(None)
    assert staging == "" and node.calls("NodeStageVolume") == []
    assert not os.path.exists(f"{root}/kubelet/plugins")
    [request] = node.calls("NodePublishVolume")
    assert request.staging_target_path == ""
    assert request.volume_capability.access_mode.mode == Mode.SINGLE_NODE_SINGLE_WRITER  # the multi-writer mapping


async def test_an_unregistered_driver_is_named_in_the_kubelets_words(root):
    ops = CsiNodeOperations(root, "node1", DriverRegistry())
    with pytest.raises(CsiOperationError) as failed:
        await ops.stage(volume(driver="missing.csi"), {})
    assert str(failed.value) == ("kubernetes.io/csi: attacher.MountDevice failed to create newCsiDriverClient: "
                                 "driver name missing.csi not found in the list of registered CSI drivers")


async def test_a_refused_publish_removes_its_directory(driver, root):
    node, ops = driver
    node.fail["NodePublishVolume"] = grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(CsiOperationError) as failed:
        await ops.publish(UID, volume(), False, {}, {})
    assert str(failed.value) == "rpc error: code = InvalidArgument desc = NodePublishVolume refused"
    assert failed.value.final
    assert os.listdir(f"{root}/kubelet/pods/{UID}/volumes/kubernetes.io~csi") == []


async def test_a_timed_out_stage_is_uncertain_and_keeps_its_record(driver, root):
    node, ops = driver
    node.fail["NodeStageVolume"] = grpc.StatusCode.DEADLINE_EXCEEDED
    with pytest.raises(CsiOperationError) as failed:
        await ops.stage(volume(), {})
    assert not failed.value.final  # the driver may have staged it: teardown must still find it
    assert vol_data.load(os.path.dirname(ops.staging_path(volume()))) == vol_data.staged_data(DRIVER, HANDLE)


async def test_a_driver_whose_socket_is_gone_is_an_uncertain_failure(root):
    client = CsiNodeClient(os.path.join(root, "nobody.sock"), timeout=5)
    with pytest.raises(CsiCallError) as failed:
        await client.node_get_capabilities()
    assert str(failed.value).startswith("rpc error: code = Unavailable desc = ") and not failed.value.final


async def test_a_driver_that_never_answers_fails_at_the_deadline(root):
    node = FakeNodeDriver()
    node.hang.add("NodeGetCapabilities")
    socket = os.path.join(root, "csi.sock")
    server = await serve(socket, csi_grpc.add_NodeServicer_to_server, node)
    try:
        with pytest.raises(CsiCallError) as failed:
            await CsiNodeClient(socket, timeout=0.3).node_get_capabilities()
    finally:
        await server.stop(None)
    assert str(failed.value).startswith("rpc error: code = DeadlineExceeded") and not failed.value.final


def test_vol_data_is_written_as_gos_encoder_writes_it():
    assert vol_data.encode({"b": "<&>", "a": "é"}) == '{"a":"é","b":"\\u003c\\u0026\\u003e"}\n'.encode()


@pytest.mark.parametrize("name", ["..", "a/b", ""])
async def test_a_volume_name_that_is_not_one_directory_is_refused(driver, name):
    node, ops = driver
    with pytest.raises(CsiOperationError, match="cannot be used as a directory name"):
        await ops.publish(UID, volume(spec_name=name), False, {}, {})
    assert node.calls("NodePublishVolume") == []
