"""An inline CSI volume through the pod path, with a driver served in-process: the pod starts
only once the driver published the volume, its container mounts the published directory, and
the volume is unpublished when the pod goes."""

from __future__ import annotations

import os
import shutil
import tempfile

from pykubelet.volumes.csi.drivers import Driver
from pykubelet.volumes.csi.v1 import csi_pb2_grpc as csi_grpc
from tests.unit.core.harness import pod, until
from tests.unit.core.test_claim_start import app, created_mounts, with_api
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
        await until(lambda: driver.calls("NodeUnpublishVolume"), what="the volume unpublished")
        [unpublish] = driver.calls("NodeUnpublishVolume")
        assert (unpublish.volume_id, unpublish.target_path) == (publish.volume_id, target)
        assert claims.csi_in_use("uid-web") == []
    finally:
        await server.stop(None)
        shutil.rmtree(directory)
