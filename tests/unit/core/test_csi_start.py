"""CSI volumes through the pod path, with a driver served in-process: an inline volume's pod
starts only once the driver published it, its container mounts the published directory, and the
volume is unpublished when the pod goes; a block PV is the container's device, torn down with
the pod, and one whose driver refuses it keeps the pod out with the kubelet's FailedMapVolume."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import AsyncIterator

import grpc

from pykubelet.volumes.csi.drivers import Driver
from pykubelet.volumes.csi.node_client import Capability
from pykubelet.volumes.csi.v1 import csi_pb2_grpc as csi_grpc
from tests.unit.core.harness import pod, until
from tests.unit.core.test_claim_start import app, bind, created_mounts, record_events, with_api
from tests.unit.csi_fakes import FakeNodeDriver, serve

DRIVER = "inline.csi.k8s.io"


async def test_an_inline_csi_volume_is_published_mounted_and_unpublished_with_its_pod(node, tmp_path):
    kube = with_api(node)
    kube.objects[f"/apis/storage.k8s.io/v1/csidrivers/{DRIVER}"] = {
        "metadata": {"name": DRIVER}, "spec": {"volumeLifecycleModes": ["Ephemeral"]}}
    directory = tempfile.mkdtemp(prefix="csi", dir="/tmp")  # short: unix socket paths are limited
    driver = FakeNodeDriver(capabilities=())
    socket = os.path.join(directory, "csi.sock")
    server = await serve(socket, csi_grpc.add_NodeServicer_to_server, driver)
    claims = node.deps.syncer.api_volumes.claims
    claims.csi.operations.drivers.add(Driver(DRIVER, socket, (1, 0, 0)))
    try:
        node.dispatcher.set_pods([pod(containers=app({"name": "scratch", "mountPath": "/scratch"}),
                                      volumes=[{"name": "scratch", "csi": {"driver": DRIVER, "readOnly": True}}])])
        await until(lambda: node.container().get("state", {}).get("running"), what="the container running")
        target = str(tmp_path / "root" / "pods" / "uid-web" / "volumes" / "kubernetes.io~csi" / "scratch" / "mount")
        [publish] = driver.calls("NodePublishVolume")
        assert publish.target_path == target
        mount = created_mounts(node)["/scratch"]
        assert (mount.host_path, mount.readonly) == (target, True)
        [in_use] = claims.csi_in_use("uid-web")  # what /stats/summary has the driver measure
        assert (in_use.volume, in_use.driver, in_use.volume_handle, in_use.target_path, in_use.claim) == (
            "scratch", DRIVER, publish.volume_id, target, "")

        node.dispatcher.set_pods([])
        # Until the agent has the driver's answer and has forgotten the volume.
        await until(lambda: not claims.csi_in_use("uid-web"), what="the volume unpublished")
        [unpublish] = driver.calls("NodeUnpublishVolume")
        assert (unpublish.volume_id, unpublish.target_path) == (publish.volume_id, target)
    finally:
        await server.stop(None)
        shutil.rmtree(directory)


async def test_a_block_csi_pv_is_the_containers_device_and_goes_with_the_pod(node, tmp_path):
    driver = FakeNodeDriver(capabilities=(Capability.STAGE_UNSTAGE_VOLUME,))
    claims = node.deps.syncer.api_volumes.claims
    async with block_pv_pod(node, driver):
        await until(lambda: node.container().get("state", {}).get("running"), what="the container running")
        link = str(tmp_path / "root" / "pods" / "uid-web" / "volumeDevices" / "kubernetes.io~csi" / "pvc-1")
        [created] = node.runtime.container_devices.values()
        assert [(d.container_path, d.host_path, d.permissions) for d in created] == [("/dev/xvda", link, "mrw")]
        [publish] = driver.calls("NodePublishVolume")
        assert os.readlink(link) == publish.target_path

        node.dispatcher.set_pods([])
        await until(lambda: not claims.csi_in_use("uid-web"), what="the volume torn down")
        assert len(driver.calls("NodeUnpublishVolume")) == len(driver.calls("NodeUnstageVolume")) == 1


async def test_a_block_csi_pv_the_driver_cannot_stage_is_a_failed_map_volume_and_no_container(node):
    events = record_events(node)
    driver = FakeNodeDriver(capabilities=(Capability.STAGE_UNSTAGE_VOLUME,))
    driver.fail["NodeStageVolume"] = grpc.StatusCode.INTERNAL
    async with block_pv_pod(node, driver):
        await until(lambda: any(reason == "FailedMapVolume" for _, reason, _ in events), timeout=30,
                    what="FailedMapVolume")
        message = next(m for kind, reason, m in events if (kind, reason) == ("Warning", "FailedMapVolume"))
        assert message.startswith('MapVolume.SetUpDevice failed for volume "pvc-1" : ') and "refused" in message
        assert not any(reason == "FailedMount" and "pvc-1" in m for _, reason, m in events)
        assert not node.runtime.containers


@contextlib.asynccontextmanager
async def block_pv_pod(node, driver: FakeNodeDriver) -> AsyncIterator[None]:
    """Pod web with claim `data` bound to the Block CSI PV pvc-1 of `driver` (served meanwhile),
    its container the device /dev/xvda; the pod goes at the end."""
    kube = with_api(node)
    kube.objects[f"/apis/storage.k8s.io/v1/csidrivers/{DRIVER}"] = {"metadata": {"name": DRIVER},
                                                                     "spec": {"attachRequired": False}}
    bind(kube, "data", "pvc-1", {"csi": {"driver": DRIVER, "volumeHandle": "vol-1"}}, volumeMode="Block")
    directory = tempfile.mkdtemp(prefix="csi", dir="/tmp")  # short: unix socket paths are limited
    socket = os.path.join(directory, "csi.sock")
    server = await serve(socket, csi_grpc.add_NodeServicer_to_server, driver)
    node.deps.syncer.api_volumes.claims.csi.operations.drivers.add(Driver(DRIVER, socket, (1, 0, 0)))
    try:
        node.dispatcher.set_pods([pod(containers=[{"name": "app", "image": "busybox:1.36", "volumeDevices": [
            {"name": "data", "devicePath": "/dev/xvda"}]}], volumes=[
            {"name": "data", "persistentVolumeClaim": {"claimName": "data"}}])])
        yield
    finally:
        node.dispatcher.set_pods([])
        await server.stop(None)
        shutil.rmtree(directory)
