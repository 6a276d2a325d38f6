"""A client of one CSI driver's node service (csi.v1.Node), as the kubelet calls it.

One connection per call over the driver's unix socket (the kubelet's way: a driver that
restarted is simply dialled again), every call with a deadline, on grpc.aio so the event loop
never waits on a driver. A failed call is a CsiCallError in gRPC's Go wording ("rpc error:
code = ... desc = ..."), the text the kubelet's FailedMount events carry, and says whether the
operation may have half-happened (`final` False: the volume may be mounted after all, so it must
be torn down, never forgotten).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Mapping

import grpc

from pykubelet.volumes.csi.v1 import csi_pb2 as csi
from pykubelet.volumes.csi.v1 import csi_pb2_grpc as csi_grpc

CALL_TIMEOUT = 120.0
"""The kubelet's csiTimeout for every node call."""

Capability = csi.NodeServiceCapability.RPC
_Mode = csi.VolumeCapability.AccessMode

# Kubernetes access mode -> CSI mode; the second table when the driver can tell several writers
# on one node apart (SINGLE_NODE_MULTI_WRITER), the kubelet's two mappers.
_ACCESS_MODES = {"ReadWriteOnce": _Mode.SINGLE_NODE_WRITER, "ReadOnlyMany": _Mode.MULTI_NODE_READER_ONLY,
                 "ReadWriteMany": _Mode.MULTI_NODE_MULTI_WRITER, "ReadWriteOncePod": _Mode.SINGLE_NODE_WRITER}
_MULTI_WRITER_ACCESS_MODES = {**_ACCESS_MODES, "ReadWriteOnce": _Mode.SINGLE_NODE_MULTI_WRITER,
                              "ReadWriteOncePod": _Mode.SINGLE_NODE_SINGLE_WRITER}

# Codes after which the driver may still be (or have finished) working on the request.
_NOT_FINAL = {grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE,
              grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.ABORTED}
_GO_CODE_NAMES = {grpc.StatusCode.OK: "OK", grpc.StatusCode.CANCELLED: "Canceled"}


def go_code_name(code: grpc.StatusCode) -> str:
    """A status code as Go's grpc prints it (NOT_FOUND -> NotFound)."""
    return _GO_CODE_NAMES.get(code) or "".join(word.capitalize() for word in code.name.split("_"))


class CsiCallError(Exception):
    """A node call that failed; `final` False when the driver may have done it anyway."""

    def __init__(self, code: grpc.StatusCode, details: str):
        self.code, self.details, self.final = code, details, code not in _NOT_FINAL
        super().__init__(f"rpc error: code = {go_code_name(code)} desc = {details}")


@dataclass(frozen=True)
class NodeInfo:
    """NodeGetInfo's answer."""

    node_id: str
    max_volumes_per_node: int
    topology: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class VolumeRequest:
    """What NodeStageVolume and NodePublishVolume are told about the volume."""

    volume_id: str
    access_mode: str = "ReadWriteOnce"
    """The Kubernetes access mode (the PV's first, ReadWriteOnce when it lists none)."""
    fs_type: str = ""
    mount_flags: tuple[str, ...] = ()
    volume_mount_group: str = ""
    """The pod's fsGroup, only for a driver with VOLUME_MOUNT_GROUP."""
    volume_context: Mapping[str, str] = field(default_factory=dict)
    publish_context: Mapping[str, str] = field(default_factory=dict)
    secrets: Mapping[str, str] = field(default_factory=dict)
    block: bool = False
    """A raw block device (volumeMode Block) rather than a filesystem to mount."""


@dataclass(frozen=True)
class VolumeUsage:
    """NodeGetVolumeStats's answer: a figure the driver does not give is 0, as the kubelet counts it."""

    available_bytes: int = 0
    capacity_bytes: int = 0
    used_bytes: int = 0
    inodes_free: int = 0
    inodes: int = 0
    inodes_used: int = 0


def volume_usage(answer: csi.NodeGetVolumeStatsResponse) -> VolumeUsage:
    """The usage figures by unit; CsiStatsError when the driver gave none."""
    if not answer.usage:
        raise CsiStatsError("failed to get usage from response. usage is nil")
    figures: dict[str, int] = {}
    for usage in answer.usage:
        if usage.unit == csi.VolumeUsage.BYTES:
            figures.update(available_bytes=usage.available, capacity_bytes=usage.total, used_bytes=usage.used)
        elif usage.unit == csi.VolumeUsage.INODES:
            figures.update(inodes_free=usage.available, inodes=usage.total, inodes_used=usage.used)
    return VolumeUsage(**figures)


class CsiStatsError(Exception):
    """A NodeGetVolumeStats answer without figures."""


def volume_capability(request: VolumeRequest, multi_writer: bool) -> csi.VolumeCapability:
    modes = _MULTI_WRITER_ACCESS_MODES if multi_writer else _ACCESS_MODES
    access_mode = _Mode(mode=modes.get(request.access_mode, _Mode.UNKNOWN))
    if request.block:
        return csi.VolumeCapability(block=csi.VolumeCapability.BlockVolume(), access_mode=access_mode)
    return csi.VolumeCapability(
        mount=csi.VolumeCapability.MountVolume(fs_type=request.fs_type, mount_flags=list(request.mount_flags),
                                               volume_mount_group=request.volume_mount_group),
        access_mode=access_mode)


class CsiNodeClient:
    """The node service of the driver listening on `endpoint` (a unix socket path)."""

    def __init__(self, endpoint: str, timeout: float = CALL_TIMEOUT):
        self.endpoint = endpoint
        self.timeout = timeout

    async def _call(self, method: Callable[[csi_grpc.NodeStub], Callable[..., Awaitable[Any]]], request: Any) -> Any:
        async with grpc.aio.insecure_channel(f"unix://{self.endpoint}") as channel:
            try:
                return await method(csi_grpc.NodeStub(channel))(request, timeout=self.timeout)
            except grpc.aio.AioRpcError as e:
                raise CsiCallError(e.code(), e.details() or "") from None

    async def node_get_info(self) -> NodeInfo:
        answer = await self._call(lambda stub: stub.NodeGetInfo, csi.NodeGetInfoRequest())
        return NodeInfo(answer.node_id, answer.max_volumes_per_node, dict(answer.accessible_topology.segments))

    async def node_get_capabilities(self) -> frozenset[int]:
        """The node RPC capabilities the driver lists (Capability.STAGE_UNSTAGE_VOLUME...)."""
        answer = await self._call(lambda stub: stub.NodeGetCapabilities, csi.NodeGetCapabilitiesRequest())
        return frozenset(c.rpc.type for c in answer.capabilities if c.HasField("rpc"))

    async def node_stage_volume(self, request: VolumeRequest, staging_target_path: str,
                                multi_writer: bool = False) -> None:
        await self._call(lambda stub: stub.NodeStageVolume, csi.NodeStageVolumeRequest(
            volume_id=request.volume_id, publish_context=dict(request.publish_context),
            staging_target_path=staging_target_path, volume_capability=volume_capability(request, multi_writer),
            secrets=dict(request.secrets), volume_context=dict(request.volume_context)))

    async def node_unstage_volume(self, volume_id: str, staging_target_path: str) -> None:
        await self._call(lambda stub: stub.NodeUnstageVolume, csi.NodeUnstageVolumeRequest(
            volume_id=volume_id, staging_target_path=staging_target_path))

    async def node_publish_volume(self, request: VolumeRequest, target_path: str, staging_target_path: str,
                                  read_only: bool, multi_writer: bool = False) -> None:
        await self._call(lambda stub: stub.NodePublishVolume, csi.NodePublishVolumeRequest(
            volume_id=request.volume_id, publish_context=dict(request.publish_context),
            staging_target_path=staging_target_path, target_path=target_path,
            volume_capability=volume_capability(request, multi_writer), readonly=read_only,
            secrets=dict(request.secrets), volume_context=dict(request.volume_context)))

    async def node_unpublish_volume(self, volume_id: str, target_path: str) -> None:
        await self._call(lambda stub: stub.NodeUnpublishVolume, csi.NodeUnpublishVolumeRequest(
            volume_id=volume_id, target_path=target_path))

    async def node_get_volume_stats(self, volume_id: str, volume_path: str) -> VolumeUsage:
        """The volume's usage (CsiCallError, or CsiStatsError for an answer without figures)."""
        answer = await self._call(lambda stub: stub.NodeGetVolumeStats, csi.NodeGetVolumeStatsRequest(
            volume_id=volume_id, volume_path=volume_path))
        return volume_usage(answer)
