"""Which CSI volumes each pod has published, kept across agent restarts, and the work on them
that happens outside a pod's own sync: the kubelet's actual state of world for its CSI plugin.

- Set-up records the volume (and how it was set up); teardown forgets it only once the driver
  unpublished it. A refused unpublish leaves the record, the volume and the pod's directory for
  the next try.
- reconstruct(), once at start: the volumes and stagings earlier runs left (reconstruct.py) are
  recorded as published, but uncertain, as the kubelet marks them. A pod still here sets them up
  again at its next sync (NodeStage and NodePublish are idempotent), then they are its own again.
- clean_up(known), from housekeeping once every pod source has spoken: the volumes of pods that
  are gone (deleted while the agent was down, or whose unpublish was refused) are unpublished,
  then the stagings nobody uses unstaged. A driver not registered yet is waited for (tried again
  at each housekeeping, so soon after it registers); a refusal is tried again with the kubelet's
  per-operation back-off (0.5 s doubling to 2m2s).
- republish(), every REPUBLISH_SECONDS: the volumes of drivers whose CSIDriver sets
  requiresRepublish are published again, with fresh service account tokens.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace
from typing import Awaitable, Callable

from pykubelet.api.pod import Pod
from pykubelet.kube.errors import KubeError
from pykubelet.util.backoff import Backoff
from pykubelet.util.log import get_logger
from pykubelet.volumes.claim_model import BLOCK, PersistentVolume
from pykubelet.volumes.csi.block import CsiBlockVolumes
from pykubelet.volumes.csi.csidriver import CsiDriverError, Get, fetch_driver_policy
from pykubelet.volumes.csi.inline import CsiInlineSource, CsiInlineVolumes
from pykubelet.volumes.csi.operations import CsiOperationError, DriverMissing
from pykubelet.volumes.csi.paths import CsiPathError, block_publish_path, inline_volume_handle, publish_target_path
from pykubelet.volumes.csi.pv_setup import CsiPersistentVolumes, CsiSetupError
from pykubelet.volumes.csi.reconstruct import FoundOnDisk, scan
from pykubelet.volumes.csi.volume_stats import CsiInUse

log = get_logger(__name__)

REPUBLISH_SECONDS = 60.0
"""How often a requiresRepublish driver's volumes are published again: the kubelet does it at
each pod sync, whose period (syncFrequency) is a minute by default."""
RETRY_INITIAL_SECONDS, RETRY_MAX_SECONDS = 0.5, 122.0
"""The kubelet's back-off of a failed volume operation."""


@dataclass(frozen=True)
class _Published:
    volume: CsiInUse
    kind: str
    """"pv", "block" or "inline": which set-up it had, so which teardown it needs."""
    pod: Pod | None = None
    """The pod as it was set up, for a republish; None for a volume found after a restart (or
    whose teardown failed)."""
    source: PersistentVolume | CsiInlineSource | None = None
    read_only: bool = False

    @property
    def reconstructed(self) -> bool:
        """Not (or no longer) a set-up of a live pod: found after a restart, or its teardown failed."""
        return self.pod is None


class CsiPodVolumes:
    def __init__(self, persistent: CsiPersistentVolumes, get: Get, clock: Callable[[], float] = time.monotonic):
        self.persistent = persistent
        self.get = get
        self.inline = CsiInlineVolumes(persistent.operations, get, persistent.tokens)
        self.block = CsiBlockVolumes(persistent.operations, get)
        self._published: dict[str, dict[str, _Published]] = {}  # pod UID -> spec name -> its volume
        self._retry = Backoff(RETRY_INITIAL_SECONDS, RETRY_MAX_SECONDS, clock)
        self._pod_locks: dict[str, asyncio.Lock] = {}
        """A pod's teardown and a republish of its volumes, one at a time: never published again once torn down."""

    @property
    def root_dir(self) -> str:
        return self.persistent.operations.root_dir

    def in_use(self, uid: str) -> list[CsiInUse]:
        """The pod's CSI volumes set up by this agent (those found after a restart have no pod
        volume name until the pod sets them up again)."""
        return [p.volume for p in self._published.get(uid, {}).values() if not p.reconstructed]

    def holders(self) -> set[str]:
        """The UIDs of the pods with a CSI volume still published (their directory must stay)."""
        return set(self._published)

    def _reconstructed(self, uid: str, spec_name: str) -> bool:
        found = self._published.get(uid, {}).get(spec_name)
        return found is not None and found.reconstructed

    async def set_up_pv(self, pod: Pod, volume: str, claim: str, pv: PersistentVolume, read_only: bool,
                        remount: bool = False) -> str:
        """Stage and publish the pod's CSI PV (map it, for a block one); the host path its
        containers get. CsiSetupError when a step failed."""
        remount = remount or self._reconstructed(pod.uid, pv.name)
        if pv.volume_mode == BLOCK:
            mapped = await self.block.set_up(pod, pv, read_only)
            path, target, kind = mapped.device_path, mapped.publish_path, "block"
        else:
            path = target = await self.persistent.set_up(pod, pv, read_only, remount)
            kind = "pv"
        source = pv.source  # its driver and volumeHandle: strings, or set_up refused it
        self._record(pod.uid, _Published(CsiInUse(volume, pv.name, target, source["driver"], source["volumeHandle"],
                                                  claim, pod.namespace, kind == "block"), kind, pod, pv, read_only))
        return path

    async def set_up_inline(self, pod: Pod, source: CsiInlineSource, remount: bool = False) -> str:
        """Publish the pod's inline CSI volume; the host path its containers mount."""
        path = await self.inline.set_up(pod, source, remount or self._reconstructed(pod.uid, source.volume))
        self._record(pod.uid, _Published(CsiInUse(source.volume, source.volume, path, source.driver,
                                                  inline_volume_handle(pod.uid, source.volume)),
                                         "inline", pod, source, source.read_only))
        return path

    def _record(self, uid: str, published: _Published) -> None:
        self._published.setdefault(uid, {})[published.volume.spec_name] = published

    async def unpublish(self, uid: str, pod_name: str) -> bool:
        """The pod's CSI volumes unpublished (and unstaged once no pod has them); True when
        none is left. One the driver refused stays recorded, for the next try."""
        return not await self._tear_down(uid, pod_name)

    async def _tear_down(self, uid: str, pod_name: str) -> list[CsiOperationError]:
        """Each of the pod's volumes torn down; the failures (logged)."""
        async with self._pod_locks.setdefault(uid, asyncio.Lock()):
            return await self._tear_down_locked(uid, pod_name)

    async def _tear_down_locked(self, uid: str, pod_name: str) -> list[CsiOperationError]:
        published = self._published.get(uid, {})
        failures = []
        for spec_name, entry in sorted(published.items()):
            try:
                if entry.kind == "inline":
                    await self.inline.tear_down(uid, spec_name)
                elif entry.kind == "block":
                    await self.block.tear_down(uid, spec_name)
                else:
                    await self.persistent.tear_down(uid, spec_name)
            except CsiOperationError as e:
                log.warning("UnmountVolume.TearDown failed", pod=pod_name, volume=spec_name, err=str(e))
                failures.append(e)
                published[spec_name] = replace(entry, pod=None, source=None)  # its pod is done with it: no republish
                continue
            del published[spec_name]
        if not published:
            self._published.pop(uid, None)
            self._pod_locks.pop(uid, None)
        return failures

    async def reconstruct(self) -> FoundOnDisk:
        """Record what earlier runs left on the disk; call once, before any pod syncs."""
        found = await asyncio.to_thread(scan, self.root_dir)
        for volume in found.volumes:
            if volume.block:
                self.block.adopt(volume.pod_uid, volume.spec_name)
            elif not volume.inline:
                self.persistent.adopt(volume.pod_uid, volume.spec_name, volume.driver, volume.volume_handle)
            try:
                target = (block_publish_path(self.root_dir, volume.spec_name, volume.pod_uid) if volume.block
                          else publish_target_path(self.root_dir, volume.pod_uid, volume.spec_name))
            except CsiPathError:
                target = ""
            kind = "block" if volume.block else "inline" if volume.inline else "pv"
            self._record(volume.pod_uid, _Published(CsiInUse(volume.spec_name, volume.spec_name, target,
                                                             volume.driver, volume.volume_handle), kind))
        for staging in found.stagings:
            if staging.block_pv:
                self.block.adopt_staging(staging.block_pv, staging.path)
            else:
                self.persistent.adopt_staging(staging.driver, staging.volume_handle, staging.path)
        for problem in found.problems:
            log.error("Could not reconstruct a CSI volume", err=problem)
        if found.volumes or found.stagings:
            log.info("CSI volumes found from an earlier run", volumes=len(found.volumes), stagings=len(found.stagings))
        return found

    async def clean_up(self, known: set[str]) -> set[str]:
        """Unpublish the volumes of the pods not in `known`, then unstage the stagings no pod
        uses, each when its back-off allows; the UIDs of the pods still holding a volume."""
        for uid in sorted(set(self._published) - known):
            if not self._retry.in_backoff_since_update(uid):
                self._retry_after(uid, await self._tear_down(uid, uid))
        for handle_key in self.persistent.leftovers():
            await self._unstage_leftover(f"staging/{handle_key[0]}/{handle_key[1]}",
                                         lambda k=handle_key: self.persistent.unstage_leftover(k))
        for pv_name in self.block.leftovers():
            await self._unstage_leftover(f"block-staging/{pv_name}", lambda p=pv_name: self.block.unstage_leftover(p))
        return self.holders()

    async def _unstage_leftover(self, key: str, unstage: Callable[[], Awaitable[None]]) -> None:
        if self._retry.in_backoff_since_update(key):
            return
        try:
            await unstage()
        except CsiOperationError as e:
            log.warning("UnmountDevice failed for a staging no pod uses", staging=key, err=str(e))
            self._retry_after(key, [e])
            return
        self._retry_after(key, [])

    def _retry_after(self, key: str, failures: list[CsiOperationError]) -> None:
        """Back off after a driver's refusal; none while the driver is not registered (it is
        asked again as soon as it is), none after success."""
        if not failures:
            self._retry.forget(key)
        elif not all(isinstance(e, DriverMissing) for e in failures):
            self._retry.next(key, self._retry.clock())

    async def republish(self) -> None:
        """Publish again the volumes of the drivers that require it (their CSIDriver's
        requiresRepublish), for the pods that have them; a failure is logged, the volume stays."""
        requires: dict[str, bool] = {}
        for uid, volumes in list(self._published.items()):
            for spec_name, entry in list(volumes.items()):
                if entry.pod is None or entry.kind == "block":
                    continue  # found after a restart: its pod sets it up again first
                driver = entry.volume.driver
                if driver not in requires:
                    requires[driver] = await self._requires_republish(driver)
                if requires[driver]:
                    async with self._pod_locks.setdefault(uid, asyncio.Lock()):
                        if self._published.get(uid, {}).get(spec_name) is entry:  # not torn down meanwhile
                            await self._republish(entry)

    async def _requires_republish(self, driver: str) -> bool:
        try:
            return (await fetch_driver_policy(self.get, driver)).requires_republish
        except (KubeError, CsiDriverError) as e:
            log.warning("Could not read a CSIDriver; its volumes are not republished now", driver=driver, err=str(e))
            return False

    async def _republish(self, entry: _Published) -> None:
        assert entry.pod is not None
        try:
            if isinstance(entry.source, CsiInlineSource):
                await self.set_up_inline(entry.pod, entry.source, remount=True)
            elif isinstance(entry.source, PersistentVolume):
                await self.set_up_pv(entry.pod, entry.volume.volume, entry.volume.claim, entry.source,
                                     entry.read_only, remount=True)
        except CsiSetupError as e:
            log.warning("MountVolume.SetUp failed to republish a volume", pod=f"{entry.pod.namespace}/{entry.pod.name}",
                        volume=entry.volume.volume, operation=e.operation, err=str(e))

    async def run_republish(self, period: float = REPUBLISH_SECONDS) -> None:
        """The republish loop (one of the agent's loops while it has an apiserver)."""
        while True:
            await asyncio.sleep(period)
            await self.republish()
