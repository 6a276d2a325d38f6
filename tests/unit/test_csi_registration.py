"""CSI plugin registration: a registrar's socket in plugins_registry registers its driver, writes
the driver's node information to the Node and the CSINode, tells the registrar, and undoes it
all when the socket goes. Driver and registrar are served in-process on unix sockets."""

from __future__ import annotations

import json
import os
import shutil
import tempfile

import pytest

from pykubelet.volumes.csi.drivers import DriverNotRegistered, DriverRegistry, highest_supported_version, VersionError
from pykubelet.volumes.csi.node_info import MIGRATED_PLUGINS_ANNOTATION, NODE_ID_ANNOTATION, NodeInfoWriter
from pykubelet.volumes.csi.plugin_watcher import PluginWatcher, registry_dir
from pykubelet.volumes.csi.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from pykubelet.volumes.csi.registration import CsiRegistrationHandler
from pykubelet.volumes.csi.v1 import csi_pb2_grpc as csi_grpc
from tests.unit.csi_fakes import FakeApi, FakeNodeDriver, FakeRegistrar, serve

NODE = "/api/v1/nodes/node1"
CSINODE = "/apis/storage.k8s.io/v1/csinodes/node1"
DRIVER = "hostpath.csi.k8s.io"


@pytest.fixture
def root():
    # unix socket paths are limited to 107 bytes: a short directory, not tmp_path
    directory = tempfile.mkdtemp(prefix="csi", dir="/tmp")
    yield directory
    shutil.rmtree(directory)


@pytest.fixture
def api() -> FakeApi:
    fake = FakeApi()
    fake.put(NODE, {"metadata": {"name": "node1", "uid": "node-uid-1", "labels": {"kubernetes.io/hostname": "node1"}}})
    return fake


class Bed:
    """A watcher on root's plugins_registry, and the servers the test started (stopped at the end)."""

    def __init__(self, root: str, api: FakeApi):
        self.root, self.api, self.servers = root, api, []
        self.drivers = DriverRegistry()
        self.watcher = PluginWatcher(registry_dir(root), CsiRegistrationHandler(self.drivers, NodeInfoWriter(api, "node1")))
        os.makedirs(registry_dir(root), exist_ok=True)

    async def driver(self, node: FakeNodeDriver, name: str = "csi.sock") -> str:
        path = os.path.join(self.root, name)
        self.servers.append(await serve(path, csi_grpc.add_NodeServicer_to_server, node))
        return path

    async def registrar(self, registrar: FakeRegistrar, name: str = f"{DRIVER}-reg.sock") -> str:
        path = os.path.join(registry_dir(self.root), name)
        server = await serve(path, reg_grpc.add_RegistrationServicer_to_server, registrar)
        self.servers.append(server)
        return path

    async def close(self) -> None:
        for server in self.servers:
            await server.stop(None)


@pytest.fixture
async def bed(root, api):
    b = Bed(root, api)
    yield b
    await b.close()


async def test_a_registrar_socket_registers_its_driver_and_writes_node_and_csinode(bed, api):
    endpoint = await bed.driver(FakeNodeDriver(node_id="node-a", max_volumes=12, topology={"topology.hostpath.csi/node": "node1"}))
    registrar = FakeRegistrar(DRIVER, endpoint)
    await bed.registrar(registrar)

    await bed.watcher.sync_once()

    assert registrar.statuses == [(True, "")]
    assert bed.drivers.get(DRIVER).endpoint == endpoint
    node = api.objects[NODE]["metadata"]
    assert json.loads(node["annotations"][NODE_ID_ANNOTATION]) == {DRIVER: "node-a"}
    assert node["labels"]["topology.hostpath.csi/node"] == "node1"
    csinode = api.objects[CSINODE]
    assert csinode["spec"]["drivers"] == [{"name": DRIVER, "nodeID": "node-a",
                                           "topologyKeys": ["topology.hostpath.csi/node"], "allocatable": {"count": 12}}]
    assert csinode["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Node", "name": "node1",
                                                       "uid": "node-uid-1"}]
    assert "kubernetes.io/gce-pd" in csinode["metadata"]["annotations"][MIGRATED_PLUGINS_ANNOTATION].split(",")

    writes = len(api.writes)
    await bed.watcher.sync_once()  # nothing changed: no second registration, no write
    assert registrar.statuses == [(True, "")] and len(api.writes) == writes


async def test_a_removed_socket_deregisters_the_driver_and_its_node_information(bed, api):
    api.objects[NODE]["metadata"]["annotations"] = {NODE_ID_ANNOTATION: json.dumps({"other.csi": "x"})}
    endpoint = await bed.driver(FakeNodeDriver(topology={"zone": "a"}))
    socket = await bed.registrar(FakeRegistrar(DRIVER, endpoint))
    await bed.watcher.sync_once()
    assert json.loads(api.objects[NODE]["metadata"]["annotations"][NODE_ID_ANNOTATION]) == {"other.csi": "x", DRIVER: "node-a"}

    os.unlink(socket)
    await bed.watcher.sync_once()

    with pytest.raises(DriverNotRegistered, match=f"driver name {DRIVER} not found in the list of registered CSI drivers"):
        bed.drivers.get(DRIVER)
    assert api.objects[CSINODE]["spec"]["drivers"] == []
    node = api.objects[NODE]["metadata"]
    assert json.loads(node["annotations"][NODE_ID_ANNOTATION]) == {"other.csi": "x"}
    assert node["labels"]["zone"] == "a"  # topology labels stay, as with the kubelet


async def test_the_last_driver_leaving_removes_the_annotation(bed, api):
    socket = await bed.registrar(FakeRegistrar(DRIVER, await bed.driver(FakeNodeDriver())))
    await bed.watcher.sync_once()
    os.unlink(socket)
    await bed.watcher.sync_once()
    assert NODE_ID_ANNOTATION not in api.objects[NODE]["metadata"].get("annotations", {})


@pytest.mark.parametrize("versions, told", [
    ((), "Plugin returned an empty list for supported versions"),
    (("0.3.0", "2.0.0"), "None of the versions specified"),
])
async def test_a_driver_without_a_csi_1_version_is_refused_and_told_why(bed, api, versions, told):
    registrar = FakeRegistrar(DRIVER, await bed.driver(FakeNodeDriver()), versions=versions)
    await bed.registrar(registrar)
    await bed.watcher.sync_once()
    [(registered, error)] = registrar.statuses
    assert not registered
    assert error.startswith(f"RegisterPlugin error -- plugin validation failed with err: validation failed for CSI Driver {DRIVER}")
    assert told in error
    assert CSINODE not in api.objects and bed.drivers.names() == []


async def test_a_plugin_of_another_type_is_refused(bed, api):
    registrar = FakeRegistrar("example.com/gpu", "", kind="DevicePlugin")
    socket = await bed.registrar(registrar, "gpu.sock")
    await bed.watcher.sync_once()
    assert registrar.statuses == [(False, f"RegisterPlugin error -- no handler registered for plugin type: DevicePlugin at socket {socket}")]


async def test_a_driver_whose_node_get_info_fails_is_not_registered(bed, api):
    import grpc
    node = FakeNodeDriver()
    node.fail["NodeGetInfo"] = grpc.StatusCode.INTERNAL
    registrar = FakeRegistrar(DRIVER, await bed.driver(node))
    await bed.registrar(registrar)
    await bed.watcher.sync_once()
    [(registered, error)] = registrar.statuses
    assert not registered
    assert error == ("RegisterPlugin error -- plugin registration failed with err: "
                     "rpc error: code = Internal desc = NodeGetInfo refused")
    assert bed.drivers.names() == []
    assert api.objects.get(CSINODE, {}).get("spec", {}).get("drivers", []) == []


async def test_a_topology_label_collision_keeps_the_driver_out(bed, api):
    api.objects[NODE]["metadata"]["labels"]["zone"] = "b"
    registrar = FakeRegistrar(DRIVER, await bed.driver(FakeNodeDriver(topology={"zone": "a"})))
    await bed.registrar(registrar)
    await bed.watcher.sync_once()
    [(registered, error)] = registrar.statuses
    assert not registered and "detected topology value collision" in error
    assert api.objects[NODE]["metadata"]["labels"]["zone"] == "b"


async def test_a_csinode_of_another_node_with_the_same_name_is_replaced(bed, api):
    api.put(CSINODE, {"metadata": {"name": "node1", "ownerReferences": [
        {"apiVersion": "v1", "kind": "Node", "name": "node1", "uid": "old-node"}]},
        "spec": {"drivers": [{"name": "stale.csi", "nodeID": "x", "topologyKeys": []}]}})
    await bed.registrar(FakeRegistrar(DRIVER, await bed.driver(FakeNodeDriver())))
    await bed.watcher.sync_once()
    csinode = api.objects[CSINODE]
    assert csinode["metadata"]["ownerReferences"][0]["uid"] == "node-uid-1"
    assert [d["name"] for d in csinode["spec"]["drivers"]] == [DRIVER]


async def test_files_that_are_not_sockets_and_hidden_sockets_are_ignored(bed, api):
    with open(os.path.join(registry_dir(bed.root), "notes.txt"), "w") as f:
        f.write("x")
    registrar = FakeRegistrar(DRIVER, await bed.driver(FakeNodeDriver()))
    await bed.registrar(registrar, ".hidden.sock")
    await bed.watcher.sync_once()
    assert registrar.statuses == [] and bed.drivers.names() == []


def test_the_highest_1x_version_is_chosen():
    assert highest_supported_version(["0.3.0", "1.0.0", "v1.2", "2.0.0"]) == (1, 2)
    with pytest.raises(VersionError):
        highest_supported_version(["1"])  # not a version: major.minor at least


async def test_a_stale_socket_does_not_hold_up_the_others(bed, api):
    import asyncio
    import socket as sockets
    from tests.helpers import wait_for
    bed.watcher.dial_timeout = 60.0  # the stale socket is given up on only after this
    stale = sockets.socket(sockets.AF_UNIX)
    stale.bind(os.path.join(registry_dir(bed.root), "a-dead-reg.sock"))  # bound, never listening; scanned first
    registrar = FakeRegistrar(DRIVER, await bed.driver(FakeNodeDriver()))
    await bed.registrar(registrar)
    sync = asyncio.create_task(bed.watcher.sync_once())
    try:
        await wait_for(lambda: registrar.statuses, 10, "the live registrar told it is registered")
    finally:
        sync.cancel()
        stale.close()
    assert registrar.statuses == [(True, "")] and bed.drivers.names() == [DRIVER]
