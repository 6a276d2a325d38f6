"""An agent restarted with a CSI PV published for a pod, through the pod path and housekeeping
with a driver served in-process: a pod still here keeps running and has its volume published
again; a pod deleted while the agent was down is stopped, and its volume unpublished and unstaged
once the driver registers, its directory removed only then."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile

import pytest

from pykubelet.pods.housekeeping import housekeeping
from pykubelet.volumes.csi.drivers import Driver
from pykubelet.volumes.csi.node_client import Capability
from pykubelet.volumes.csi.v1 import csi_pb2_grpc as csi_grpc
from tests.fakes.kube import FakeKube
from tests.fakes.runtime import FakeRuntime
from tests.unit.core.harness import Core, clock, pod, until
from tests.unit.core.test_claim_start import app, bind
from tests.unit.csi_fakes import FakeNodeDriver, serve

DRIVER = "hostpath.csi.k8s.io"


def web():
    return pod(containers=app({"name": "data", "mountPath": "/data"}),
               volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}])


@pytest.fixture
async def restarted(tmp_path):
    """The first agent ran the pod with its CSI PV and stopped; the second is built over the same
    runtime and disk (its driver not registered yet) and has reconstructed: (second, driver, register)."""
    kube = FakeKube()
    kube.objects[f"/apis/storage.k8s.io/v1/csidrivers/{DRIVER}"] = {"spec": {"attachRequired": False}}
    bind(kube, "data", "pvc-1", {"csi": {"driver": DRIVER, "volumeHandle": "vol-1"}})
    directory = tempfile.mkdtemp(prefix="csi", dir="/tmp")  # short: unix socket paths are limited
    driver = FakeNodeDriver(capabilities=(Capability.STAGE_UNSTAGE_VOLUME,))
    socket = os.path.join(directory, "csi.sock")
    server = await serve(socket, csi_grpc.add_NodeServicer_to_server, driver)
    runtime = FakeRuntime(clock)
    agents = []

    def agent() -> Core:
        core = Core(runtime, tmp_path)
        core.deps.syncer.api_volumes.claims.get = kube.get
        agents.append(core)
        return core

    def register(core: Core) -> None:
        core.deps.syncer.api_volumes.claims.csi.operations.drivers.add(Driver(DRIVER, socket, (1, 0, 0)))
    try:
        first = agent()
        register(first)
        first.start().dispatcher.set_pods([web()])
        await until(lambda: first.container().get("state", {}).get("running"), what="the container running")
        await first.stop()
        second = agent()
        await second.deps.syncer.api_volumes.claims.csi_pods.reconstruct()
        yield second.start(), driver, lambda: register(second)
    finally:
        await agents[-1].stop()
        await server.stop(None)
        shutil.rmtree(directory)


async def test_a_pod_still_here_keeps_running_and_has_its_volume_published_again(restarted):
    second, driver, register = restarted
    register()
    second.dispatcher.set_pods([web()])
    await until(lambda: len(driver.calls("NodePublishVolume")) == 2, what="the volume published again")
    assert len(driver.calls("NodeStageVolume")) == 2
    assert len(second.runtime.started("app")) == 1  # adopted, not restarted

    second.dispatcher.set_pods([])
    await until(lambda: driver.calls("NodeUnstageVolume"), what="the volume unstaged")
    assert len(driver.calls("NodeUnpublishVolume")) == 1


async def test_a_pod_deleted_meanwhile_is_unpublished_once_its_driver_registers_and_then_its_directory_goes(
        restarted, tmp_path):
    second, driver, register = restarted
    pod_dir = tmp_path / "root" / "pods" / "uid-web"
    ready = asyncio.Event()
    task = asyncio.create_task(housekeeping(
        second.dispatcher, second.cache, second.pleg.relisted, [ready], str(tmp_path / "root"),
        clean_up_volumes=second.deps.syncer.api_volumes.claims.csi_pods.clean_up))
    try:
        second.dispatcher.set_pods([])  # the pod was deleted while the agent was down
        ready.set()
        await until(lambda: not second.runtime.containers, what="the orphan's containers removed")
        await asyncio.sleep(2.5)  # a housekeeping pass more
        assert driver.calls("NodeUnpublishVolume") == []
        assert (pod_dir / "volumes" / "kubernetes.io~csi" / "pvc-1" / "vol_data.json").is_file()

        register()
        await until(lambda: not pod_dir.exists(), what="the pod's directory removed")
        [unpublish] = driver.calls("NodeUnpublishVolume")
        assert unpublish.target_path == str(pod_dir / "volumes" / "kubernetes.io~csi" / "pvc-1" / "mount")
        assert len(driver.calls("NodeUnstageVolume")) == 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
