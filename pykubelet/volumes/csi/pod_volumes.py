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
  then the stagings nobody uses unstaged, each as its own task (in_flight.py), so that a driver
  that does not answer holds up neither housekeeping nor the other volumes.
- republish(), every REPUBLISH_SECONDS: the volumes of drivers whose CSIDriver sets
  requiresRepublish are published again (republish.py).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace
from typing import Awaitable, Callable

from pykubelet.api.pod import Pod
from pykubelet.kube.events import EventRecorder
from pykubelet.util.log import get_logger
from pykubelet.volumes.claim_model import BLOCK, PersistentVolume
from pykubelet.volumes.csi.block import CsiBlockVolumes
from pykubelet.volumes.csi.csidriver import Get
from pykubelet.volumes.csi.in_flight import InFlight
from pykubelet.volumes.csi.inline import CsiInlineSource, CsiInlineVolumes
from pykubelet.volumes.csi.operations import CsiOperationError
from pykubelet.volumes.csi.paths import CsiPathError, block_publish_path, inline_volume_handle, publish_target_path
from pykubelet.volumes.csi.pv_setup import CsiPersistentVolumes, CsiSetupError
from pykubelet.volumes.csi.reconstruct import FoundOnDisk, scan
from pykubelet.volumes.csi.republish import REPUBLISH_SECONDS, CsiRepublisher, RepublishTarget
from pykubelet.volumes.csi.volume_stats import CsiInUse

log = get_logger(__name__)


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
        self._in_flight = InFlight(clock)
        self.republisher = CsiRepublisher(self._republish_targets, self._republish, get, clock)
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        """A volume's teardown and its republish, one at a time: never published again once torn down."""

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

    def _lock(self, uid: str, spec_name: str) -> asyncio.Lock:
        return self._locks.setdefault((uid, spec_name), asyncio.Lock())

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
        for spec_name in sorted(self._published.get(uid, {})):
            await self._tear_down(uid, spec_name, pod_name)
        return uid not in self._published

    async def _tear_down(self, uid: str, spec_name: str, pod_name: str) -> list[CsiOperationError]:
        """The pod's volume torn down (if still recorded); its failure (logged)."""
        async with self._lock(uid, spec_name):
            published = self._published.get(uid, {})
            entry = published.get(spec_name)
            if entry is None:
                return []
            try:
                if entry.kind == "inline":
                    await self.inline.tear_down(uid, spec_name)
                elif entry.kind == "block":
                    await self.block.tear_down(uid, spec_name)
                else:
                    await self.persistent.tear_down(uid, spec_name)
            except CsiOperationError as e:
                log.warning("UnmountVolume.TearDown failed", pod=pod_name, volume=spec_name, err=str(e))
                published[spec_name] = replace(entry, pod=None, source=None)  # its pod is done with it: no republish
                return [e]
            del published[spec_name]
            self._locks.pop((uid, spec_name), None)
            if not published:
                self._published.pop(uid, None)
            return []

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
        """Start unpublishing the volumes of the pods not in `known`, and unstaging the stagings
        no pod uses, each when its back-off allows and none of its work is in flight; returns at
        once the UIDs of the pods still holding a volume (one being unpublished among them)."""
        for uid in sorted(set(self._published) - known):
            for spec_name in sorted(self._published[uid]):
                self._in_flight.start(f"volume/{uid}/{spec_name}",
                                      lambda u=uid, n=spec_name: self._tear_down(u, n, u))
        for handle_key in self.persistent.leftovers():
            key = f"staging/{handle_key[0]}/{handle_key[1]}"
            self._in_flight.start(key, lambda k=key, h=handle_key:
                                  _unstage_leftover(k, self.persistent.unstage_leftover(h)))
        for pv_name in self.block.leftovers():
            key = f"block-staging/{pv_name}"
            self._in_flight.start(key, lambda k=key, p=pv_name: _unstage_leftover(k, self.block.unstage_leftover(p)))
        return self.holders()

    async def settle(self) -> None:
        """Until the work clean_up started is done (tests; a stopping agent may rather stop())."""
        await self._in_flight.settle()

    async def stop(self) -> None:
        """Cancel the work clean_up started; an agent started later finds what is left on disk."""
        await self._in_flight.stop()

    def _republish_targets(self) -> list[RepublishTarget]:
        return [RepublishTarget(entry.pod, spec_name, entry.volume.driver, entry.kind == "block")
                for volumes in self._published.values() for spec_name, entry in sorted(volumes.items())
                if entry.pod is not None]  # found after a restart: its pod sets it up again first

    async def _republish(self, target: RepublishTarget) -> CsiSetupError | None:
        """The volume set up again as it was, unless torn down meanwhile; its failure."""
        uid = target.pod.uid
        async with self._lock(uid, target.spec_name):
            entry = self._published.get(uid, {}).get(target.spec_name)
            if entry is None or entry.pod is None:
                return None
            try:
                if isinstance(entry.source, CsiInlineSource):
                    await self.set_up_inline(entry.pod, entry.source, remount=True)
                elif isinstance(entry.source, PersistentVolume):
                    await self.set_up_pv(entry.pod, entry.volume.volume, entry.volume.claim, entry.source,
                                         entry.read_only, remount=True)
            except CsiSetupError as e:
                return e
            return None

    async def republish(self, periodic: bool = True) -> None:
        """Publish again the volumes of the drivers that require it (republish.py)."""
        await self.republisher.republish(periodic)

    async def run_republish(self, recorder: EventRecorder | None = None, period: float = REPUBLISH_SECONDS) -> None:
        """The republish loop (one of the agent's loops while it has an apiserver); a failure
        is an event on its pod through `recorder`."""
        self.republisher.recorder = recorder
        await self.republisher.run(period)


async def _unstage_leftover(key: str, unstage: Awaitable[None]) -> list[CsiOperationError]:
    try:
        await unstage
    except CsiOperationError as e:
        log.warning("UnmountDevice failed for a staging no pod uses", staging=key, err=str(e))
        return [e]
    return []
