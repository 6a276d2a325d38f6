"""A node's persistent volumes: each pod's claims resolved (claims.py), checked and set up
(persistent.py; CSI PVs through their drivers, csi/pv_setup.py), and what its containers mount
from them. A CSI PV of volumeMode Block is mapped as a device (csi/block.py) that the containers
listing it in volumeDevices get. A pod's inline CSI volumes (csi/inline.py) go the same way as
claims: read from the pod's spec instead of a claim, and published by their driver. Which CSI
volumes each pod has published, also across agent restarts, is csi/pod_volumes.py's to know.

What the kubelet's volume manager does for them, in its order and words:
- processing (the claim, its PV, the volume mode) fails → the pod-level "Unable to attach or
  mount volumes" (the caller reports it), tried again on a later sync;
- then per volume, each a `FailedMount` event "<op> failed for volume "<pv>" : <error>": the
  PV's required node affinity against this Node's labels, mount options (hostPath takes none),
  ReadWriteOncePod (a local PV mounted for another pod of the node), then the set-up itself.

A claim volume set up stays so for the pod's life (the kubelet mounts it once): later syncs do
not ask the API again. A finished pod's local mounts are released (teardown), so a
ReadWriteOncePod volume can go to the next pod.
"""

from __future__ import annotations

import asyncio
import subprocess
from dataclasses import dataclass
from typing import Any

from pykubelet.api.pod import Pod, Volume
from pykubelet.kube.errors import KubeError
from pykubelet.volumes import persistent
from pykubelet.volumes.claim_model import BLOCK, READ_WRITE_ONCE_POD, ClaimObjectError
from pykubelet.volumes.claims import ClaimError, Get, ResolvedClaim, resolve
from pykubelet.volumes.csi.drivers import DriverRegistry
from pykubelet.volumes.csi.inline import CsiInlineSource, InlineSourceError, parse_inline_source
from pykubelet.volumes.csi.operations import CsiNodeOperations
from pykubelet.volumes.csi.pod_volumes import CsiPodVolumes
from pykubelet.volumes.csi.pv_setup import CsiPersistentVolumes, CsiSetupError
from pykubelet.volumes.csi.volume_stats import CsiInUse
from pykubelet.volumes.local import VolumeSetupError
from pykubelet.volumes.node_affinity import affinity_error
from pykubelet.volumes.support import CLAIM_KINDS, Unprocessable, device_volume_names, mounted_volume_names


@dataclass(frozen=True)
class ClaimMount:
    """What a container mounts for a claim volume (or gets as a device, for a block volume)."""

    host_path: str
    read_only: bool
    block: bool = False
    """A raw block device (volumeMode Block) for volumeDevices, not a directory to mount."""


@dataclass(frozen=True)
class MountFailure:
    volume: str
    """The pod's volume name."""
    operation: str
    pv: str
    """The spec name the kubelet's events use for a claim: the PV's."""
    error: str

    @property
    def message(self) -> str:
        return f'{self.operation} failed for volume "{self.pv}" : {self.error}'

    @property
    def reason(self) -> str:
        """The event's reason: the kubelet reports a block volume's map steps as FailedMapVolume."""
        return "FailedMapVolume" if self.operation.startswith("MapVolume.") else "FailedMount"


async def _no_api(path: str) -> Any:
    raise KubeError("GET", path, 0, "", "no kubeClient defined")


class ClaimVolumes:
    def __init__(self, root_dir: str, node_name: str, get: Get | None, csi: CsiPersistentVolumes | None = None):
        self.root_dir = root_dir
        self.node_name = node_name
        self.get: Get = get or _no_api  # None: standalone, no claims can be read
        # No CSI parts: no driver is registered, and a CSI PV fails as with an unregistered driver.
        self.csi = csi or CsiPersistentVolumes(CsiNodeOperations(root_dir, node_name, DriverRegistry()),
                                                lambda path: self.get(path))
        self.csi_pods = CsiPodVolumes(self.csi, lambda path: self.get(path))
        self._mounts: dict[str, dict[str, ClaimMount]] = {}  # pod UID -> volume -> its mount
        self._local_in_use: dict[str, set[str]] = {}  # local PV name -> UIDs of pods with it mounted

    def mounts_of(self, uid: str) -> dict[str, ClaimMount]:
        """The pod's claim volumes set up so far: volume name -> what containers mount."""
        return dict(self._mounts.get(uid, {}))

    def csi_in_use(self, uid: str) -> list[CsiInUse]:
        """The pod's CSI volumes published so far."""
        return self.csi_pods.in_use(uid)

    async def resolve(self, pod: Pod) -> tuple[list[ResolvedClaim | CsiInlineSource], list[Unprocessable]]:
        """The pod's used claim and inline CSI volumes not set up yet, resolved; and those that
        cannot be."""
        mounted, devices, done = mounted_volume_names(pod), device_volume_names(pod), self._mounts.get(pod.uid, {})
        used = mounted | devices
        resolved: list[ResolvedClaim | CsiInlineSource] = []
        failed = []
        for index, volume in enumerate(pod.volumes):
            if volume.kind not in (*CLAIM_KINDS, "csi") or volume.name not in used or volume.name in done:
                continue
            try:
                if volume.kind == "csi":
                    resolved.append(_inline(pod, index, volume, volume.name in devices))
                else:
                    resolved.append(await resolve(pod, volume, self.get, volume.name in mounted,
                                                  volume.name in devices))
            except (ClaimError, ClaimObjectError, InlineSourceError) as e:
                failed.append(Unprocessable(volume.name, volume.kind, str(e)))
        return resolved, failed

    async def _node_labels(self) -> dict[str, str]:
        node = await self.get(f"/api/v1/nodes/{self.node_name}")
        labels = (node.get("metadata") or {}).get("labels") if isinstance(node, dict) else None
        return {k: v for k, v in labels.items() if isinstance(v, str)} if isinstance(labels, dict) else {}

    async def _check(self, pod: Pod, claim: ResolvedClaim, labels: dict[str, str] | str) -> MountFailure | None:
        """`labels`: the Node's, or why they could not be read."""
        pv = claim.pv

        def fail(operation: str, error: str) -> MountFailure:
            return MountFailure(claim.volume, operation, pv.name, error)
        if pv.node_affinity is not None:
            if isinstance(labels, str):
                return fail("MountVolume.NodeAffinity check", f"error retrieving node: {labels}")
            why = affinity_error(pv, labels)
            if why is not None:
                return fail("MountVolume.NodeAffinity check", why)
        if pv.mount_options and pv.source_kind == "hostPath":
            return fail("MountVolume.MountOptionSupport check", "mount options are not supported for this volume type")
        # Only a local PV has one name across pods in the kubelet's books (hostPath volumes are
        # named per pod), so only it can be "in use by another pod".
        if pv.source_kind == "local" and pv.access_modes == (READ_WRITE_ONCE_POD,) and \
                await self._local_in_use_elsewhere(pod.uid, pv.name):
            return fail("MountVolume.SetUp", "volume uses the ReadWriteOncePod access mode and is already in use "
                                             "by another pod")
        return None

    async def _local_in_use_elsewhere(self, uid: str, pv_name: str) -> bool:
        """Whether another pod has the local PV mounted: as this agent knows, or as the mount
        table shows (a pod an earlier agent set up, not synced again yet)."""
        if self._local_in_use.get(pv_name, set()) - {uid}:
            return True
        return bool(await asyncio.to_thread(persistent.mounted_by_other_pods, self.root_dir, uid, pv_name))

    async def setup(self, pod: Pod, resolved: list[ResolvedClaim | CsiInlineSource]) -> list[MountFailure]:
        """Check and set up each resolved volume on its own; the ones that failed."""
        labels: dict[str, str] | str = {}
        if any(isinstance(c, ResolvedClaim) and c.pv.node_affinity is not None for c in resolved):
            try:
                labels = await self._node_labels()
            except KubeError as e:
                labels = e.message or str(e)
        failures = []
        for claim in resolved:
            if isinstance(claim, CsiInlineSource):
                failure = await self._set_up_inline(pod, claim)
                if failure is not None:
                    failures.append(failure)
                continue
            failure = await self._check(pod, claim, labels)
            if failure is None:
                failure = await self._set_up(pod, claim)
            if failure is not None:
                failures.append(failure)
        return failures

    async def _set_up(self, pod: Pod, claim: ResolvedClaim) -> MountFailure | None:
        if claim.pv.source_kind == "csi":
            return await self._set_up_csi(pod, claim)
        try:
            path = await asyncio.to_thread(persistent.set_up, self.root_dir, pod.uid, claim.pv, claim.read_only,
                                           pod.fs_group, pod.fs_group_change_policy)
        except (VolumeSetupError, OSError, ValueError, subprocess.CalledProcessError) as e:
            return MountFailure(claim.volume, "MountVolume.SetUp", claim.pv.name, str(e))
        self._mounts.setdefault(pod.uid, {})[claim.volume] = ClaimMount(path, claim.read_only)
        if claim.pv.source_kind == "local":
            self._local_in_use.setdefault(claim.pv.name, set()).add(pod.uid)
        return None

    async def _set_up_csi(self, pod: Pod, claim: ResolvedClaim) -> MountFailure | None:
        try:
            path = await self.csi_pods.set_up_pv(pod, claim.volume, claim.claim.name, claim.pv, claim.read_only)
        except CsiSetupError as e:
            return MountFailure(claim.volume, e.operation, claim.pv.name, str(e))
        self._mounts.setdefault(pod.uid, {})[claim.volume] = ClaimMount(path, claim.read_only,
                                                                        claim.pv.volume_mode == BLOCK)
        return None

    async def _set_up_inline(self, pod: Pod, source: CsiInlineSource) -> MountFailure | None:
        try:
            path = await self.csi_pods.set_up_inline(pod, source)
        except CsiSetupError as e:
            return MountFailure(source.volume, e.operation, source.volume, str(e))
        self._mounts.setdefault(pod.uid, {})[source.volume] = ClaimMount(path, source.read_only)
        return None

    def _release(self, uid: str) -> list[str]:
        """Forget the pod's mounts; the local PVs it had."""
        self._mounts.pop(uid, None)
        had = [pv for pv, users in self._local_in_use.items() if uid in users]
        for pv in had:
            self._local_in_use[pv].discard(uid)
            if not self._local_in_use[pv]:
                del self._local_in_use[pv]
        return had

    async def teardown(self, pod: Pod) -> None:
        """A finished pod's local mounts unmounted and its CSI volumes unpublished (no container
        of it starts again)."""
        for pv in self._release(pod.uid):
            await asyncio.to_thread(persistent.tear_down_local, self.root_dir, pod.uid, pv)
        await self.unpublish(pod.uid, f"{pod.namespace}/{pod.name}")

    async def unpublish(self, uid: str, pod_name: str) -> bool:
        """The CSI volumes published for the pod unpublished (and unstaged once no pod has them);
        True when none is left. One the driver refused stays recorded, for the next teardown
        (or housekeeping's, once the pod is gone: csi/pod_volumes.py)."""
        return await self.csi_pods.unpublish(uid, pod_name)

    def forget(self, uid: str) -> None:
        """The pod is gone (its directory, with any mount left, is removed by the caller)."""
        self._release(uid)


def _inline(pod: Pod, index: int, volume: Volume, as_device: bool) -> CsiInlineSource:
    if as_device:  # the API refuses it too: an inline CSI volume is always a filesystem
        raise InlineSourceError(f"pod {pod.namespace}/{pod.name}: volume {volume.name!r}: an inline CSI volume "
                                f"cannot be used in volumeDevices")
    return parse_inline_source(pod, index, volume)
