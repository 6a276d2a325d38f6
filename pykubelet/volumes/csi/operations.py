"""Stage, publish, unpublish and unstage a CSI volume, with the kubelet's paths and files.

The order the kubelet follows: a volume is staged once per node at its global mount path
(NodeStageVolume, only for drivers with STAGE_UNSTAGE_VOLUME), then published into each pod at
the pod's target path (NodePublishVolume); teardown runs the other way. Each step records a
vol_data.json next to its directory first, so teardown (even by a restarted agent) needs only the
disk. The agent makes the target's parent; the driver makes and removes the target itself; what
is left empty and unmounted afterwards is removed. Directory work runs in a thread, the driver
calls on the event loop with deadlines (node_client.py).

Errors are CsiOperationError with the kubelet's text; `final` False means the driver may have
done the work anyway (a timeout...), so the caller must count the volume as maybe mounted.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, TypeVar

from pykubelet.util.mounts import is_mount_point
from pykubelet.volumes.csi import paths, vol_data
from pykubelet.volumes.csi.drivers import DriverNotRegistered, DriverRegistry
from pykubelet.volumes.csi.node_client import Capability, CsiCallError, CsiNodeClient, VolumeRequest

_PREFIX = "kubernetes.io/csi: "
T = TypeVar("T")
DIR_MODE = 0o750


class CsiOperationError(Exception):
    """A step that failed, in the kubelet's words; `final` False: it may have half-happened."""

    def __init__(self, message: str, final: bool = True):
        self.final = final
        super().__init__(message)


class DriverMissing(CsiOperationError):
    """No driver of the name is registered (yet): nothing was asked of any driver."""


@dataclass(frozen=True)
class CsiVolume:
    """One CSI volume as the node sets it up."""

    spec_name: str
    """The PV's name, or the pod volume's for an inline volume: the directory in the pod."""
    driver: str
    volume_handle: str
    lifecycle_mode: str = vol_data.PERSISTENT
    access_mode: str = "ReadWriteOnce"
    fs_type: str = ""
    mount_options: tuple[str, ...] = ()
    volume_attributes: Mapping[str, str] = field(default_factory=dict)
    publish_context: Mapping[str, str] = field(default_factory=dict)
    """The VolumeAttachment's status.attachmentMetadata; empty when the driver needs no attach."""


@dataclass(frozen=True)
class Published:
    target_path: str
    fs_group_applied_by_driver: bool
    """The driver took the fsGroup (VOLUME_MOUNT_GROUP); otherwise it is the agent's to apply."""


def remove_mount_dir(target: str) -> None:
    """The kubelet's removeMountDir: an unmounted target, its vol_data.json and their directory."""
    if is_mount_point(target):
        return  # still mounted: leave everything for a later teardown
    parent = os.path.dirname(target)
    for remove, path in ((os.rmdir, target), (os.unlink, os.path.join(parent, paths.VOL_DATA_FILE)),
                         (os.rmdir, parent)):
        try:
            remove(path)
        except FileNotFoundError:
            pass
        except NotADirectoryError:
            os.unlink(path)  # a block volume's target is a file


def prepare(directory: str, data_dir: str, data: dict[str, str]) -> None:
    """Make directory (0750, parents too) and record data in data_dir/vol_data.json."""
    os.makedirs(directory, mode=DIR_MODE, exist_ok=True)
    vol_data.save(data_dir, data)


async def on_disk(what: str, function: Callable[..., T], *args: Any) -> T:
    """Run a blocking directory or file step in a thread; its failure as a CsiOperationError."""
    try:
        return await asyncio.to_thread(function, *args)
    except (OSError, vol_data.VolDataError) as e:
        raise CsiOperationError(f"{_PREFIX}{what}: {e}") from None


def rpc_error(e: CsiCallError) -> CsiOperationError:
    return CsiOperationError(str(e), e.final)


class CsiNodeOperations:
    """The node-side steps for the drivers in `drivers`, under the agent's `root_dir`."""

    def __init__(self, root_dir: str, node_name: str, drivers: DriverRegistry):
        self.root_dir = root_dir
        self.node_name = node_name
        self.drivers = drivers

    def client(self, driver: str, who: str) -> CsiNodeClient:
        """The driver's node service; CsiOperationError, in the kubelet's words with `who` (its
        step), when no driver of that name is registered on the node."""
        try:
            return self.drivers.client(driver)
        except DriverNotRegistered as e:
            # Transient: the driver may register later (or again, after its pod restarted).
            raise DriverMissing(f"{_PREFIX}{who}: {e}") from None

    async def capabilities(self, client: CsiNodeClient) -> frozenset[int]:
        try:
            return await client.node_get_capabilities()
        except CsiCallError as e:
            raise CsiOperationError(str(e)) from None  # nothing was asked of the driver yet

    async def stages(self, driver: str) -> bool:
        """Whether the driver stages volumes (STAGE_UNSTAGE_VOLUME): only then are stage secrets read."""
        client = self.client(driver, "attacher.MountDevice failed to create newCsiDriverClient")
        return Capability.STAGE_UNSTAGE_VOLUME in await self.capabilities(client)

    def staging_path(self, volume: CsiVolume) -> str:
        try:
            return paths.global_mount_path(self.root_dir, volume.driver, volume.volume_handle)
        except paths.CsiPathError as e:
            raise CsiOperationError(str(e)) from None

    def target_path(self, pod_uid: str, spec_name: str) -> str:
        """NodePublishVolume's target for the pod's volume."""
        try:
            return paths.publish_target_path(self.root_dir, pod_uid, spec_name)
        except paths.CsiPathError as e:
            raise CsiOperationError(str(e)) from None

    async def stage(self, volume: CsiVolume, secrets: Mapping[str, str], fs_group: int | None = None) -> str:
        """NodeStageVolume at the global mount path; that path, or "" for a driver that does not
        stage (then nothing is written: the kubelet's empty directory would only be left behind)."""
        client = self.client(volume.driver, "attacher.MountDevice failed to create newCsiDriverClient")
        capabilities = await self.capabilities(client)
        if Capability.STAGE_UNSTAGE_VOLUME not in capabilities:
            return ""
        staging = self.staging_path(volume)
        await on_disk("attacher.MountDevice failed to create dir", prepare, staging, os.path.dirname(staging),
                       vol_data.staged_data(volume.driver, volume.volume_handle))
        try:
            await client.node_stage_volume(
                self._request(volume, secrets, volume.volume_attributes, fs_group, capabilities), staging,
                multi_writer=Capability.SINGLE_NODE_MULTI_WRITER in capabilities)
        except CsiCallError as e:
            if e.final:
                await on_disk("attacher.MountDevice failed to remove mount dir", remove_mount_dir, staging)
            raise rpc_error(e) from None
        return staging

    async def unstage(self, staging_path: str) -> None:
        """NodeUnstageVolume of what vol_data.json beside staging_path names, then the directories.
        Nothing recorded there: nothing was staged."""
        data = await on_disk("attacher.UnmountDevice failed to get driver and volume name", vol_data.load,
                              os.path.dirname(staging_path))
        if data is None:
            return
        client = self.client(data.get(vol_data.DRIVER_NAME, ""), "attacher.UnmountDevice failed to create newCsiDriverClient")
        if Capability.STAGE_UNSTAGE_VOLUME in await self.capabilities(client):
            try:
                await client.node_unstage_volume(data.get(vol_data.VOLUME_HANDLE, ""), staging_path)
            except CsiCallError as e:
                raise CsiOperationError(f"{_PREFIX}attacher.UnmountDevice failed: {e}", e.final) from None
        await on_disk("failed to clean up global mount", remove_mount_dir, staging_path)

    async def publish(self, pod_uid: str, volume: CsiVolume, read_only: bool, secrets: Mapping[str, str],
                      volume_context: Mapping[str, str], staging_path: str = "",
                      fs_group: int | None = None, remount: bool = False) -> Published:
        """NodePublishVolume at the pod's target path. volume_context: the volume's attributes with
        the pod information a podInfoOnMount driver gets; staging_path: what stage() returned;
        remount: published before (a republish, or found after a restart), so a refusal leaves
        the target and its data file alone: the pod may be using what is mounted there."""
        client = self.client(volume.driver, "mounter.SetUpAt failed to get CSI client")
        capabilities = await self.capabilities(client)
        target = self.target_path(pod_uid, volume.spec_name)
        data = vol_data.published_data(volume.spec_name, volume.driver, volume.volume_handle, self.node_name,
                                       volume.lifecycle_mode)
        # Only the target's parent: the target itself is the driver's to make.
        await on_disk("mounter.SetUpAt failed to create dir", prepare, os.path.dirname(target),
                       os.path.dirname(target), data)
        try:
            await client.node_publish_volume(
                self._request(volume, secrets, volume_context, fs_group, capabilities), target, staging_path,
                read_only, multi_writer=Capability.SINGLE_NODE_MULTI_WRITER in capabilities)
        except CsiCallError as e:
            if e.final and not remount:
                await on_disk("mounter.SetupAt failed to remove mount dir", remove_mount_dir, target)
            raise rpc_error(e) from None
        return Published(target, fs_group is not None and Capability.VOLUME_MOUNT_GROUP in capabilities)

    async def unpublish(self, pod_uid: str, spec_name: str) -> None:
        """NodeUnpublishVolume of the pod's volume that vol_data.json names, then its directories."""
        target = self.target_path(pod_uid, spec_name)
        data = await on_disk("Unmounter.TearDownAt failed to read volume data", vol_data.load, os.path.dirname(target))
        if data is None:
            return
        client = self.client(data.get(vol_data.DRIVER_NAME, ""), "Unmounter.TearDownAt failed to get CSI client")
        try:
            await client.node_unpublish_volume(data.get(vol_data.VOLUME_HANDLE, ""), target)
        except CsiCallError as e:
            raise CsiOperationError(f"{_PREFIX}Unmounter.TearDownAt failed: {e}", e.final) from None
        await on_disk("Unmounter.TearDownAt failed to clean mount dir", remove_mount_dir, target)

    @staticmethod
    def _request(volume: CsiVolume, secrets: Mapping[str, str], context: Mapping[str, str], fs_group: int | None,
                 capabilities: frozenset[int]) -> VolumeRequest:
        delegate = fs_group is not None and Capability.VOLUME_MOUNT_GROUP in capabilities
        return VolumeRequest(volume.volume_handle, volume.access_mode, volume.fs_type, volume.mount_options,
                             str(fs_group) if delegate else "", context, volume.publish_context, secrets)
