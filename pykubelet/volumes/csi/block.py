"""A pod's CSI PersistentVolume of volumeMode Block: a raw device, set up and torn down as the
kubelet's CSI block mapper does, with its paths (csi/paths.py).

Set up: the volume's vol_data.json is kept in its data directory; it is staged once per node
(NodeStageVolume with a block capability, at the staging directory, for drivers with
STAGE_UNSTAGE_VOLUME), then published for each pod (NodePublishVolume at the pod's publish path,
where the driver puts the device: a device node or a file bind-mounted over it); the pod's device
map path, a symbolic link to the publish path, is what its containers get as a device. The
kubelet also bind-mounts each publish path into a global map directory and holds a loop device
on it, which keeps other tools from detaching the device while pods use it; this node does not.

Teardown: the pod's link is removed and the volume unpublished; once no pod of this agent has
the volume it is unstaged and its directories (data, publish, staging) removed. Failures are
CsiSetupError/CsiOperationError in the kubelet's words, as for filesystem volumes.
"""

from __future__ import annotations

import os
import shutil
import asyncio
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from pykubelet.api.pod import Pod
from pykubelet.volumes.claim_model import PersistentVolume
from pykubelet.volumes.csi import paths, vol_data
from pykubelet.volumes.csi.csidriver import PERSISTENT, Get
from pykubelet.volumes.csi.node_client import Capability, CsiCallError, VolumeRequest
from pykubelet.volumes.csi.operations import DIR_MODE, CsiNodeOperations, CsiOperationError, on_disk, rpc_error
from pykubelet.volumes.csi.pv_setup import (CsiSetupError, StagedVolume, attachment_metadata, driver_policy,
                                            pod_info, secrets_of)
from pykubelet.volumes.csi.source import CsiSourceError, parse_csi_source

_PREFIX = "kubernetes.io/csi: "


@dataclass(frozen=True)
class MappedDevice:
    device_path: str
    """The pod's link to the device: the host path its containers get."""
    publish_path: str
    """NodePublishVolume's target (what NodeGetVolumeStats is asked about)."""


def _prepare_data(data_dir: str, data: dict[str, str]) -> None:
    os.makedirs(data_dir, mode=DIR_MODE, exist_ok=True)
    vol_data.save(data_dir, data)


def _link(device_path: str, publish_path: str) -> None:
    """The pod's device map path, a symbolic link to the publish path (replaced if it exists)."""
    os.makedirs(os.path.dirname(device_path), mode=DIR_MODE, exist_ok=True)
    if os.path.lexists(device_path):
        os.unlink(device_path)
    os.symlink(publish_path, device_path)


def _unlink(device_path: str) -> None:
    try:
        os.unlink(device_path)
    except FileNotFoundError:
        pass


def _remove_volume_dirs(root_dir: str, spec_name: str) -> None:
    """The kubelet's cleanup after unstaging: the (empty) publish directory, the staging path and
    the volume's directory with its data."""
    for path in (os.path.dirname(paths.block_publish_path(root_dir, spec_name, "x")),
                 paths.block_staging_path(root_dir, spec_name)):
        try:
            os.rmdir(path)
        except FileNotFoundError:
            pass
    shutil.rmtree(os.path.dirname(paths.block_data_dir(root_dir, spec_name)), ignore_errors=True)


class CsiBlockVolumes:
    """The block CSI PVs of this node's pods; `get` reads API objects (CSIDriver, VolumeAttachment, Secret)."""

    def __init__(self, operations: CsiNodeOperations, get: Get):
        self.operations = operations
        self.get = get
        self._staged: dict[str, StagedVolume] = {}  # PV name -> its staging path ("" when not staged), pods using it
        self._locks: dict[str, asyncio.Lock] = {}  # PV name -> one operation at a time

    def _lock(self, pv_name: str) -> asyncio.Lock:
        return self._locks.setdefault(pv_name, asyncio.Lock())

    @property
    def _root(self) -> str:
        return self.operations.root_dir

    def _paths(self, pod_uid: str, spec_name: str) -> tuple[str, str, str]:
        """(staging, publish, device map) paths; CsiSetupError for a name that is not one directory."""
        try:
            return (paths.block_staging_path(self._root, spec_name),
                    paths.block_publish_path(self._root, spec_name, pod_uid),
                    paths.pod_device_map_path(self._root, pod_uid, spec_name))
        except paths.CsiPathError as e:
            raise CsiSetupError("MapVolume.MapPodDevice", str(e)) from None

    async def set_up(self, pod: Pod, pv: PersistentVolume, read_only: bool) -> MappedDevice:
        """Stage (once) and publish the PV for the pod, and link the pod to it."""
        async with self._lock(pv.name):
            return await self._set_up(pod, pv, read_only)

    async def _set_up(self, pod: Pod, pv: PersistentVolume, read_only: bool) -> MappedDevice:
        try:
            source = parse_csi_source(pv.name, pv.source)
        except CsiSourceError as e:
            raise CsiSetupError("MapVolume.NewBlockVolumeMapper initialization", str(e)) from None
        staging, publish, device = self._paths(pod.uid, pv.name)
        policy = await driver_policy(self.get, source.driver, PERSISTENT)
        context = (await attachment_metadata(self.get, self.operations.node_name, source, "MapVolume.WaitForAttach")
                   if policy.attach_required else {})
        access_mode = pv.access_modes[0] if pv.access_modes else "ReadWriteOnce"
        try:
            client = self.operations.client(source.driver, "blockMapper.SetUpDevice failed to get CSI client")
            capabilities = await self.operations.capabilities(client)
        except CsiOperationError as e:
            raise CsiSetupError("MapVolume.SetUpDevice", str(e)) from None
        multi_writer = Capability.SINGLE_NODE_MULTI_WRITER in capabilities
        await self._on_disk("MapVolume.SetUpDevice", "failed to create data dir", _prepare_data,
                            paths.block_data_dir(self._root, pv.name),
                            vol_data.block_data(pv.name, source.driver, source.volume_handle, self.operations.node_name))
        staged_volume = self._staged.get(pv.name)
        if staged_volume is None or staged_volume.uncertain:  # uncertain: found after a restart, staged again
            staged = ""
            if Capability.STAGE_UNSTAGE_VOLUME in capabilities:
                secrets = await secrets_of(self.get, source.node_stage_secret_ref, "NodeStageSecretRef",
                                           "MapVolume.SetUpDevice")
                await self._on_disk("MapVolume.SetUpDevice", "blockMapper.stageVolumeForBlock failed to create dir",
                                    os.makedirs, staging, DIR_MODE, True)
                request = VolumeRequest(source.volume_handle, access_mode, volume_context=source.volume_attributes,
                                        publish_context=context, secrets=secrets, block=True)
                await self._call("MapVolume.SetUpDevice", client.node_stage_volume(request, staging, multi_writer))
                staged = staging
            staged_volume = self._staged.setdefault(pv.name, StagedVolume(staged))
            staged_volume.path, staged_volume.uncertain = staged, False
        attributes = dict(source.volume_attributes)
        if policy.pod_info_on_mount:
            attributes.update(pod_info(pod, ephemeral=False))
        secrets = await secrets_of(self.get, source.node_publish_secret_ref, "NodePublishSecretRef",
                                   "MapVolume.MapPodDevice")
        await self._on_disk("MapVolume.MapPodDevice", "blockMapper.publishVolumeForBlock failed to create dir",
                            os.makedirs, os.path.dirname(publish), DIR_MODE, True)
        request = VolumeRequest(source.volume_handle, access_mode, volume_context=attributes, publish_context=context,
                                secrets=secrets, block=True)
        # The staging path even for a driver that does not stage: the kubelet always passes it.
        await self._call("MapVolume.MapPodDevice",
                         client.node_publish_volume(request, publish, staging, read_only, multi_writer))
        staged_volume.pods.add(pod.uid)
        await self._on_disk("MapVolume.MapBlockVolume", "failed to link the pod's device", _link, device, publish)
        return MappedDevice(device, publish)

    async def tear_down(self, pod_uid: str, pv_name: str) -> None:
        """Unlink and unpublish the pod's volume; unstage it when no other pod of this agent has
        it. CsiOperationError when the driver refused (the caller retries; a refused unstage is
        retried by unstage_leftover)."""
        async with self._lock(pv_name):
            await self._tear_down(pod_uid, pv_name)

    async def _tear_down(self, pod_uid: str, pv_name: str) -> None:
        staging, publish, device = self._paths(pod_uid, pv_name)
        await on_disk("UnmapVolume.UnmapBlockVolume failed", _unlink, device)
        data = await on_disk("blockMapper.UnmapPodDevice failed to read volume data", vol_data.load,
                             paths.block_data_dir(self._root, pv_name))
        if data is None:
            return  # nothing was set up
        client = self.operations.client(data.get(vol_data.DRIVER_NAME, ""),
                                        "blockMapper.UnmapPodDevice failed to get CSI client")
        handle = data.get(vol_data.VOLUME_HANDLE, "")
        try:
            await client.node_unpublish_volume(handle, publish)
        except CsiCallError as e:
            raise CsiOperationError(f"{_PREFIX}blockMapper.unpublishVolumeForBlock failed: {e}", e.final) from None
        staged = self._staged.get(pv_name)
        if staged is None:
            return
        staged.pods.discard(pod_uid)
        if not staged.pods:
            await self._unstage(pv_name, staged)

    async def _unstage(self, pv_name: str, staged: StagedVolume) -> None:
        """NodeUnstageVolume (a driver that stages), then the volume's files."""
        try:
            data = await on_disk("blockMapper.unstageVolumeForBlock failed to read volume data", vol_data.load,
                                 paths.block_data_dir(self._root, pv_name))
            if data is not None and staged.path:
                client = self.operations.client(data.get(vol_data.DRIVER_NAME, ""),
                                                "blockMapper.unstageVolumeForBlock failed to get CSI client")
                if Capability.STAGE_UNSTAGE_VOLUME in await self.operations.capabilities(client):
                    try:
                        await client.node_unstage_volume(data.get(vol_data.VOLUME_HANDLE, ""), staged.path)
                    except CsiCallError as e:
                        raise CsiOperationError(f"{_PREFIX}blockMapper.unstageVolumeForBlock failed: {e}",
                                                e.final) from None
        except CsiOperationError:
            staged.uncertain = True  # a leftover now: unstage_leftover tries again
            raise
        del self._staged[pv_name]
        await on_disk("failed to clean up the volume's block device files", _remove_volume_dirs, self._root, pv_name)

    def adopt(self, pod_uid: str, pv_name: str) -> None:
        """A pod's published block PV found after a restart: a user of its staging, which is
        counted as uncertain (staged again at the pod's next set-up)."""
        try:
            path = paths.block_staging_path(self._root, pv_name)
        except paths.CsiPathError:
            return  # never set up: the name cannot be a directory
        self._staged.setdefault(pv_name, StagedVolume(path, uncertain=True)).pods.add(pod_uid)

    def adopt_staging(self, pv_name: str, path: str) -> None:
        """A block staging found after a restart; with no pod it is a leftover."""
        self._staged.setdefault(pv_name, StagedVolume(path, uncertain=True))

    def leftovers(self) -> list[str]:
        """The PV names of the stagings no pod uses that are not known to be unstaged."""
        return [name for name, staged in self._staged.items() if not staged.pods and staged.uncertain]

    async def unstage_leftover(self, pv_name: str) -> None:
        """NodeUnstageVolume of a leftover staging (if still one); CsiOperationError when refused."""
        async with self._lock(pv_name):
            staged = self._staged.get(pv_name)
            if staged is not None and not staged.pods and staged.uncertain:
                await self._unstage(pv_name, staged)

    @staticmethod
    async def _on_disk(operation: str, what: str, function: Callable[..., Any], *args: Any) -> None:
        try:
            await on_disk(what, function, *args)
        except CsiOperationError as e:
            raise CsiSetupError(operation, str(e)) from None

    @staticmethod
    async def _call(operation: str, call: Awaitable[None]) -> None:
        try:
            await call
        except CsiCallError as e:
            raise CsiSetupError(operation, str(rpc_error(e))) from None
