"""A pod's CSI PersistentVolume, set up and torn down as the kubelet's CSI plugin does.

Set up, in the kubelet's order: the driver's CSIDriver (its defaults when there is none) must
allow persistent volumes; a driver that needs attaching must have its VolumeAttachment attached
(its attachment metadata is the publish context); the volume is staged once per node (with the
nodeStageSecretRef's data), then published into the pod (with the nodePublishSecretRef's data,
the volume attributes and, for a podInfoOnMount driver, the pod's identity); the pod's fsGroup
goes to the driver (VOLUME_MOUNT_GROUP) or is applied by the agent where the CSIDriver's
fsGroupPolicy says so. Each failure is a CsiSetupError naming the kubelet's operation, for a
FailedMount event; the caller tries again later.

Teardown unpublishes the pod's volume, and unstages it once no pod of this agent has it. What an
earlier agent left (found by reconstruct.py) is adopted: its pods count as users of the staging,
which is staged again at the next set-up; a staging no pod uses is a leftover, unstaged later.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from pykubelet.api.pod import Pod
from pykubelet.kube.errors import KubeError
from pykubelet.volumes.claim_model import PersistentVolume
from pykubelet.volumes.csi import paths
from pykubelet.volumes.csi.csidriver import PERSISTENT, CsiDriverError, CsiDriverPolicy, Get, fetch_driver_policy
from pykubelet.volumes.csi.operations import CsiNodeOperations, CsiOperationError, CsiVolume, Published
from pykubelet.volumes.csi.sa_tokens import ServiceAccountTokenError, TokenSource, service_account_tokens
from pykubelet.volumes.csi.source import (CsiPersistentSource, CsiSourceError, SecretFetchError, SecretRef,
                                          fetch_secret, parse_csi_source, pod_info_context)
from pykubelet.volumes.ownership import change_ownership

_PREFIX = "kubernetes.io/csi: "


class CsiSetupError(Exception):
    """A step of the set-up failed: `operation` is the kubelet's (MountVolume.SetUp...)."""

    def __init__(self, operation: str, message: str):
        self.operation = operation
        super().__init__(message)


@dataclass
class StagedVolume:
    """A volume staged on the node (NodeStageVolume), and the pods of this agent it is published for."""

    path: str
    """The staging path; "" for a driver that does not stage."""
    pods: set[str] = field(default_factory=set)
    uncertain: bool = False
    """Found on disk after a restart, or its unstage failed: it may or may not be staged."""


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


async def token_attributes(tokens: TokenSource | None, policy: CsiDriverPolicy, pod: Pod) -> dict[str, str]:
    """The service account tokens the driver asks for (sa_tokens.py); CsiSetupError when one cannot be had."""
    try:
        return await service_account_tokens(tokens, policy, pod)
    except ServiceAccountTokenError as e:
        raise CsiSetupError("MountVolume.SetUp", str(e)) from None


def add_tokens(context: dict[str, str], secrets: dict[str, str], policy: CsiDriverPolicy,
               tokens: dict[str, str]) -> None:
    """The tokens into the request's volume_context, or its secrets (serviceAccountTokenInSecrets)."""
    (secrets if policy.token_in_secrets else context).update(tokens)


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
    """The CSI PVs of this node's pods; `get` reads API objects (CSIDriver, VolumeAttachment,
    Secret), `tokens` the pods' service account tokens for drivers that ask for them."""

    def __init__(self, operations: CsiNodeOperations, get: Get, tokens: TokenSource | None = None):
        self.operations = operations
        self.get = get
        self.tokens = tokens
        self._staged: dict[tuple[str, str], StagedVolume] = {}  # (driver, handle) -> staging path, pods using it
        self._published: dict[tuple[str, str], tuple[str, str]] = {}  # (pod UID, PV) -> (driver, handle)
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        """One operation at a time per volume: a pod's set-up never races another's unstage."""

    def _lock(self, key: tuple[str, str]) -> asyncio.Lock:
        return self._locks.setdefault(key, asyncio.Lock())

    async def set_up(self, pod: Pod, pv: PersistentVolume, read_only: bool, remount: bool = False) -> str:
        """Stage (once) and publish the PV for the pod; the host path containers mount.
        remount: published before (a republish): a refused publish leaves the target alone."""
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
        async with self._lock(key):
            staged = self._staged.get(key)
            try:
                # A staging found on disk after a restart is staged again (NodeStageVolume is
                # idempotent), as the kubelet does with a device mount it is not sure of.
                if staged is None or staged.uncertain:
                    stage_secrets = (await secrets_of(self.get, source.node_stage_secret_ref, "NodeStageSecretRef",
                                                      "MountVolume.MountDevice")
                                     if await self.operations.stages(source.driver) else {})
                    path = await self.operations.stage(volume, stage_secrets, pod.fs_group)
                    staged = self._staged.setdefault(key, StagedVolume(path))
                    staged.path, staged.uncertain = path, False
            except CsiOperationError as e:
                raise CsiSetupError("MountVolume.MountDevice", str(e)) from None
            context = dict(source.volume_attributes)
            if policy.pod_info_on_mount:
                context.update(pod_info(pod, ephemeral=False))
            secrets = await secrets_of(self.get, source.node_publish_secret_ref, "NodePublishSecretRef",
                                       "MountVolume.SetUp")
            add_tokens(context, secrets, policy, await token_attributes(self.tokens, policy, pod))
            try:
                published = await self.operations.publish(pod.uid, volume, read_only, secrets, context,
                                                          staged.path, pod.fs_group, remount)
            except CsiOperationError as e:
                raise CsiSetupError("MountVolume.SetUp", str(e)) from None
            staged.pods.add(pod.uid)
            self._published[(pod.uid, pv.name)] = key
        await apply_fs_group(pod, published, policy, source.fs_type, pv.access_modes, read_only)
        return published.target_path

    async def tear_down(self, pod_uid: str, pv_name: str) -> None:
        """Unpublish the pod's volume; unstage it when no other pod of this agent has it.
        CsiOperationError when the driver refused (the caller retries; a refused unstage is
        retried by unstage_leftover)."""
        key = self._published.get((pod_uid, pv_name))
        if key is None:
            await self.operations.unpublish(pod_uid, pv_name)
            return
        async with self._lock(key):
            await self.operations.unpublish(pod_uid, pv_name)
            del self._published[(pod_uid, pv_name)]
            staged = self._staged.get(key)
            if staged is None:
                return
            staged.pods.discard(pod_uid)
            if not staged.pods:
                await self._unstage(key, staged)

    async def _unstage(self, key: tuple[str, str], staged: StagedVolume) -> None:
        try:
            if staged.path:
                await self.operations.unstage(staged.path)
        except CsiOperationError:
            staged.uncertain = True  # a leftover now: unstage_leftover tries again
            raise
        del self._staged[key]

    def adopt(self, pod_uid: str, pv_name: str, driver: str, volume_handle: str) -> None:
        """A pod's published PV found on disk after a restart: counted as a user of its staging,
        which is counted as uncertain (staged again at the pod's next set-up)."""
        key = (driver, volume_handle)
        self._published[(pod_uid, pv_name)] = key
        self._staged.setdefault(key, StagedVolume(self._staging_path(driver, volume_handle), uncertain=True)) \
            .pods.add(pod_uid)

    def adopt_staging(self, driver: str, volume_handle: str, path: str) -> None:
        """A staging found on disk after a restart; with no pod it is a leftover."""
        self._staged.setdefault((driver, volume_handle), StagedVolume(path, uncertain=True))

    def _staging_path(self, driver: str, volume_handle: str) -> str:
        try:
            return paths.global_mount_path(self.operations.root_dir, driver, volume_handle)
        except paths.CsiPathError:
            return ""  # never staged there: the name cannot be a directory

    def leftovers(self) -> list[tuple[str, str]]:
        """(driver, volume handle) of the stagings no pod uses that are not known to be unstaged."""
        return [key for key, staged in self._staged.items() if not staged.pods and staged.uncertain]

    async def unstage_leftover(self, key: tuple[str, str]) -> None:
        """NodeUnstageVolume of a leftover staging (if still one); CsiOperationError when refused."""
        async with self._lock(key):
            staged = self._staged.get(key)
            if staged is not None and not staged.pods and staged.uncertain:
                await self._unstage(key, staged)
