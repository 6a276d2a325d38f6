"""A pod's CSI PersistentVolume, set up and torn down as the kubelet's CSI plugin does.

Set up, in the kubelet's order: the driver's CSIDriver (its defaults when there is none) must
allow persistent volumes; a driver that needs attaching must have its VolumeAttachment attached
(its attachment metadata is the publish context); the volume is staged once per node (with the
nodeStageSecretRef's data), then published into the pod (with the nodePublishSecretRef's data,
the volume attributes and, for a podInfoOnMount driver, the pod's identity); the pod's fsGroup
goes to the driver (VOLUME_MOUNT_GROUP) or is applied by the agent where the CSIDriver's
fsGroupPolicy says so. Each failure is a CsiSetupError naming the kubelet's operation, for a
FailedMount event; the caller tries again later.

Teardown unpublishes the pod's volume, and unstages it once no pod of this agent has it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from pykubelet.api.pod import Pod
from pykubelet.kube.errors import KubeError
from pykubelet.volumes.claim_model import PersistentVolume
from pykubelet.volumes.csi import paths
from pykubelet.volumes.csi.csidriver import PERSISTENT, CsiDriverError, CsiDriverPolicy, Get, fetch_driver_policy
from pykubelet.volumes.csi.operations import CsiNodeOperations, CsiOperationError, CsiVolume, Published
from pykubelet.volumes.csi.source import (CsiPersistentSource, CsiSourceError, SecretFetchError, SecretRef,
                                          fetch_secret, parse_csi_source, pod_info_context)
from pykubelet.volumes.ownership import change_ownership

_PREFIX = "kubernetes.io/csi: "


class CsiSetupError(Exception):
    """A step of the set-up failed: `operation` is the kubelet's (MountVolume.SetUp...)."""

    def __init__(self, operation: str, message: str):
        self.operation = operation
        super().__init__(message)


@dataclass(frozen=True)
class _Staged:
    path: str
    pods: set[str]


def applies_fs_group(policy: CsiDriverPolicy, fs_type: str, access_modes: tuple[str, ...], read_only: bool) -> bool:
    """Whether the agent changes the volume's group to the pod's fsGroup (the kubelet's rule)."""
    if policy.fs_group_policy == "None" or read_only:
        return False
    if policy.fs_group_policy == "File":
        return True
    return bool(fs_type) and any(m in ("ReadWriteOnce", "ReadWriteOncePod") for m in access_modes)


async def apply_fs_group(pod: Pod, published: Published, policy: CsiDriverPolicy, fs_type: str,
                         access_modes: tuple[str, ...], read_only: bool) -> None:
    """The pod's fsGroup on the published volume, when the driver did not take it and the
    CSIDriver's policy gives it to the agent."""
    if pod.fs_group is not None and not published.fs_group_applied_by_driver and \
            applies_fs_group(policy, fs_type, access_modes, read_only):
        await asyncio.to_thread(change_ownership, published.target_path, pod.fs_group,
                                pod.fs_group_change_policy, read_only)


def _go_quoted(items: tuple[str, ...]) -> str:
    return "[" + " ".join(f'"{item}"' for item in items) + "]"  # Go's %q of a list of strings


async def driver_policy(get: Get, driver: str, lifecycle_mode: str) -> CsiDriverPolicy:
    """The driver's CSIDriver, checked to allow volumes of `lifecycle_mode` (Persistent or
    Ephemeral; with no CSIDriver only persistent ones): CsiSetupError as the kubelet words it."""
    why = f"{_PREFIX}mounter.SetupAt failed to check volume lifecycle mode: "
    try:
        policy = await fetch_driver_policy(get, driver)
    except (KubeError, CsiDriverError) as e:
        raise CsiSetupError("MountVolume.SetUp", f"{why}{getattr(e, 'message', '') or e}") from None
    if not policy.exists and lifecycle_mode != PERSISTENT:
        raise CsiSetupError("MountVolume.SetUp", f'{why}volume mode "{lifecycle_mode}" not supported by driver '
                                                 f"{driver} (no CSIDriver object)")
    if lifecycle_mode not in policy.lifecycle_modes:
        raise CsiSetupError("MountVolume.SetUp", f'{why}volume mode "{lifecycle_mode}" not supported by driver '
                                                 f"{driver} (only supports {_go_quoted(policy.lifecycle_modes)})")
    return policy


async def secrets_of(get: Get, ref: SecretRef | None, field: str, operation: str) -> dict[str, str]:
    """The data of the secret `ref` names ({} when none): CsiSetupError for `operation` when it
    cannot be read. field: NodeStageSecretRef or NodePublishSecretRef, for the message."""
    if ref is None:
        return {}
    try:
        return await fetch_secret(get, ref, field)
    except SecretFetchError as e:
        raise CsiSetupError(operation, str(e)) from None


def pod_info(pod: Pod, ephemeral: bool) -> dict[str, str]:
    """What a podInfoOnMount driver is told about the pod, in volume_context."""
    account = pod.raw.get("spec", {}).get("serviceAccountName") or ""
    return pod_info_context(pod.name, pod.namespace, pod.uid, account, ephemeral)


async def attachment_metadata(get: Get, node_name: str, source: CsiPersistentSource,
                              operation: str = "MountVolume.WaitForAttach") -> dict[str, str]:
    """The VolumeAttachment's attachment metadata (the publish context), once the attacher has
    attached the volume to the node; CsiSetupError for `operation` until then."""
    name = paths.attachment_name(source.volume_handle, source.driver, node_name)
    try:
        attachment = await get(f"/apis/storage.k8s.io/v1/volumeattachments/{name}")
    except KubeError as e:
        raise CsiSetupError(operation, f"volume {source.volume_handle} has GET error for volume attachment {name}: "
                                       f"{e.message or e}") from None
    status = attachment.get("status") or {} if isinstance(attachment, dict) else {}
    if (attachment.get("metadata") or {}).get("deletionTimestamp"):
        raise CsiSetupError(operation, "volume attachment is being deleted")
    if status.get("attached") is not True:
        error = (status.get("attachError") or {}).get("message")
        raise CsiSetupError(operation, error or f"volume {source.volume_handle} is not attached for volume "
                                                f"attachment {name}")
    metadata = status.get("attachmentMetadata") or {}
    return {k: v for k, v in metadata.items() if isinstance(v, str)} if isinstance(metadata, dict) else {}


class CsiPersistentVolumes:
    """The CSI PVs of this node's pods; `get` reads API objects (CSIDriver, VolumeAttachment, Secret)."""

    def __init__(self, operations: CsiNodeOperations, get: Get):
        self.operations = operations
        self.get = get
        self._staged: dict[tuple[str, str], _Staged] = {}  # (driver, handle) -> staging path, pods using it
        self._published: dict[tuple[str, str], tuple[str, str]] = {}  # (pod UID, PV) -> (driver, handle)

    async def set_up(self, pod: Pod, pv: PersistentVolume, read_only: bool) -> str:
        """Stage (once) and publish the PV for the pod; the host path containers mount."""
        try:
            source = parse_csi_source(pv.name, pv.source)
        except CsiSourceError as e:
            raise CsiSetupError("MountVolume.NewMounter initialization", str(e)) from None
        policy = await driver_policy(self.get, source.driver, PERSISTENT)
        volume = CsiVolume(pv.name, source.driver, source.volume_handle, PERSISTENT,
                           pv.access_modes[0] if pv.access_modes else "ReadWriteOnce", source.fs_type,
                           pv.mount_options, source.volume_attributes,
                           await attachment_metadata(self.get, self.operations.node_name, source)
                           if policy.attach_required else {})
        key = (source.driver, source.volume_handle)
        try:
            if key not in self._staged:
                stage_secrets = (await secrets_of(self.get, source.node_stage_secret_ref, "NodeStageSecretRef",
                                                  "MountVolume.MountDevice")
                                 if await self.operations.stages(source.driver) else {})
                path = await self.operations.stage(volume, stage_secrets, pod.fs_group)
                self._staged[key] = _Staged(path, set())
        except CsiOperationError as e:
            raise CsiSetupError("MountVolume.MountDevice", str(e)) from None
        context = dict(source.volume_attributes)
        if policy.pod_info_on_mount:
            context.update(pod_info(pod, ephemeral=False))
        secrets = await secrets_of(self.get, source.node_publish_secret_ref, "NodePublishSecretRef",
                                   "MountVolume.SetUp")
        try:
            published = await self.operations.publish(pod.uid, volume, read_only, secrets, context,
                                                      self._staged[key].path, pod.fs_group)
        except CsiOperationError as e:
            raise CsiSetupError("MountVolume.SetUp", str(e)) from None
        self._staged[key].pods.add(pod.uid)
        self._published[(pod.uid, pv.name)] = key
        await apply_fs_group(pod, published, policy, source.fs_type, pv.access_modes, read_only)
        return published.target_path

    async def tear_down(self, pod_uid: str, pv_name: str) -> None:
        """Unpublish the pod's volume; unstage it when no other pod of this agent has it.
        CsiOperationError when the driver refused (the caller retries)."""
        await self.operations.unpublish(pod_uid, pv_name)
        key = self._published.pop((pod_uid, pv_name), None)
        staged = self._staged.get(key) if key else None
        if staged is None:
            return
        staged.pods.discard(pod_uid)
        if not staged.pods:
            if staged.path:
                await self.operations.unstage(staged.path)
            del self._staged[key]
