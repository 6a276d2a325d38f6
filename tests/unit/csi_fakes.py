"""In-process stand-ins for the CSI tests: a CSI driver's node service and a registrar's
registration service served by grpcio on unix sockets, and an apiserver's object store."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any, AsyncIterator

import grpc

from pykubelet.kube.errors import Conflict, NotFound
from pykubelet.volumes.csi.drivers import Driver, DriverRegistry
from pykubelet.volumes.csi.node_client import Capability
from pykubelet.volumes.csi.pluginregistration.v1 import api_pb2 as reg
from pykubelet.volumes.csi.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from pykubelet.volumes.csi.v1 import csi_pb2 as csi
from pykubelet.volumes.csi.v1 import csi_pb2_grpc as csi_grpc


class FakeNodeDriver(csi_grpc.NodeServicer):
    """A driver's node service: records every request; publishes by making the target directory
    (as a real driver makes its mount point); `fail` maps a method name to the status it answers."""

    def __init__(self, capabilities: tuple[int, ...] = (Capability.STAGE_UNSTAGE_VOLUME,), node_id: str = "node-a",
                 max_volumes: int = 0, topology: dict[str, str] | None = None):
        self.capabilities = capabilities
        self.info = csi.NodeGetInfoResponse(node_id=node_id, max_volumes_per_node=max_volumes,
                                            accessible_topology=csi.Topology(segments=topology or {}))
        self.requests: list[tuple[str, Any]] = []
        self.fail: dict[str, grpc.StatusCode] = {}
        self.hang: set[str] = set()
        """Methods that never answer (until the server stops)."""
        self.usage: list[csi.VolumeUsage] = []
        """What NodeGetVolumeStats answers."""

    async def _answer(self, method: str, request: Any, context: Any) -> None:
        self.requests.append((method, request))
        if method in self.hang:
            await asyncio.Event().wait()
        if method in self.fail:
            await context.abort(self.fail[method], f"{method} refused")

    def calls(self, method: str) -> list[Any]:
        return [r for m, r in self.requests if m == method]

    async def NodeGetInfo(self, request, context):
        await self._answer("NodeGetInfo", request, context)
        return self.info

    async def NodeGetCapabilities(self, request, context):
        await self._answer("NodeGetCapabilities", request, context)
        return csi.NodeGetCapabilitiesResponse(capabilities=[
            csi.NodeServiceCapability(rpc=csi.NodeServiceCapability.RPC(type=c)) for c in self.capabilities])

    async def NodeStageVolume(self, request, context):
        await self._answer("NodeStageVolume", request, context)
        return csi.NodeStageVolumeResponse()

    async def NodeUnstageVolume(self, request, context):
        await self._answer("NodeUnstageVolume", request, context)
        return csi.NodeUnstageVolumeResponse()

    async def NodePublishVolume(self, request, context):
        await self._answer("NodePublishVolume", request, context)
        if request.volume_capability.HasField("block"):
            open(request.target_path, "a").close()  # where a real driver bind-mounts the device
        else:
            os.makedirs(request.target_path, exist_ok=True)
        return csi.NodePublishVolumeResponse()

    async def NodeUnpublishVolume(self, request, context):
        await self._answer("NodeUnpublishVolume", request, context)
        if os.path.isdir(request.target_path):
            os.rmdir(request.target_path)
        elif os.path.isfile(request.target_path):
            os.unlink(request.target_path)
        return csi.NodeUnpublishVolumeResponse()


    async def NodeGetVolumeStats(self, request, context):
        await self._answer("NodeGetVolumeStats", request, context)
        return csi.NodeGetVolumeStatsResponse(usage=self.usage)


class FakeRegistrar(reg_grpc.RegistrationServicer):
    """node-driver-registrar's registration service: who the driver is, and what it was told."""

    def __init__(self, name: str, endpoint: str, versions: tuple[str, ...] = ("1.0.0",), kind: str = "CSIPlugin"):
        self.info = reg.PluginInfo(type=kind, name=name, endpoint=endpoint, supported_versions=list(versions))
        self.statuses: list[tuple[bool, str]] = []

    async def GetInfo(self, request, context):
        return self.info

    async def NotifyRegistrationStatus(self, request, context):
        self.statuses.append((request.plugin_registered, request.error))
        return reg.RegistrationStatusResponse()


async def serve(socket_path: str, add: Any, servicer: Any) -> grpc.aio.Server:
    """Start a grpc.aio server for servicer (add: the generated add_..._to_server) on socket_path."""
    server = grpc.aio.server()
    add(servicer, server)
    server.add_insecure_port(f"unix://{socket_path}")
    await server.start()
    return server


@dataclass(frozen=True)
class ServedDriver:
    root: str
    """A fresh directory of the test's (the kubelet root goes below it)."""
    socket: str
    drivers: DriverRegistry
    """The node's registered drivers: this one, under its name."""


@contextlib.asynccontextmanager
async def served_node_driver(node: FakeNodeDriver, name: str) -> AsyncIterator[ServedDriver]:
    """`node` served on a unix socket in a fresh directory, registered as driver `name`; the
    server stopped and the directory removed afterwards."""
    root = tempfile.mkdtemp(prefix="csi", dir="/tmp")  # short: unix socket paths are limited
    socket = os.path.join(root, "csi.sock")
    server = await serve(socket, csi_grpc.add_NodeServicer_to_server, node)
    drivers = DriverRegistry()
    drivers.add(Driver(name, socket, (1, 0, 0)))
    try:
        yield ServedDriver(root, socket, drivers)
    finally:
        await server.stop(None)
        shutil.rmtree(root)


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():  # RFC 7386 merge patch
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


class FakeApi:
    """Objects by path, with resourceVersions, as the kube client's get/create/replace/patch/delete see them."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.writes: list[tuple[str, str]] = []
        self._version = 0

    def put(self, path: str, obj: dict[str, Any]) -> None:
        self._version += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self._version)
        self.objects[path] = obj

    async def get(self, path: str) -> Any:
        if path not in self.objects:
            raise NotFound("GET", path, 404, "NotFound", f"{path} not found")
        return copy.deepcopy(self.objects[path])

    async def create(self, path: str, body: dict[str, Any]) -> Any:
        full = f"{path}/{body['metadata']['name']}"
        if full in self.objects:
            raise Conflict("POST", path, 409, "AlreadyExists", "exists")
        self.writes.append(("create", full))
        self.put(full, copy.deepcopy(body))
        return await self.get(full)

    async def replace(self, path: str, body: dict[str, Any]) -> Any:
        current = await self.get(path)
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise Conflict("PUT", path, 409, "Conflict", "the object has been modified")
        self.writes.append(("replace", path))
        self.put(path, copy.deepcopy(body))
        return await self.get(path)

    async def patch(self, path: str, body: dict[str, Any]) -> Any:
        path = path.removesuffix("/status")
        current = await self.get(path)
        wanted = (body.get("metadata") or {}).get("resourceVersion")
        if wanted is not None and wanted != current["metadata"]["resourceVersion"]:
            raise Conflict("PATCH", path, 409, "Conflict", "the object has been modified")
        _merge(current, body)
        self.writes.append(("patch", path))
        self.put(path, current)
        return await self.get(path)

    async def delete(self, path: str) -> Any:
        await self.get(path)
        self.writes.append(("delete", path))
        return self.objects.pop(path)
