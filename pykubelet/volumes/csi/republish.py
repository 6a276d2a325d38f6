"""requiresRepublish: the volumes of a driver whose CSIDriver asks for it are published again
periodically (NodePublishVolume again, with fresh service account tokens for a tokenRequests
driver), as the kubelet remounts them at each sync of their pod.

As the kubelet does it:
- every volume kind: a filesystem PV and an inline volume are set up again, a block PV mapped
  again (its NodePublishVolume at the pod's publish path; the staging is kept, as the kubelet
  does not set up a device it holds as globally mounted again);
- a failure is a Warning event on the pod, `FailedMount` ("MountVolume.SetUp failed for volume
  "<name>" : <error>"), `FailedMapVolume` for a block volume ("MapVolume.MapPodDevice failed
  ..."); the published volume is left as it is and the pod keeps running;
- a failed volume stays due: it is tried again when its back-off ends (0.5 s doubling to 2m2s,
  the kubelet's per-operation back-off), sooner than the next period; a volume still backing
  off waits for it, also at a period.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Awaitable, Callable

from pykubelet.api.pod import Pod
from pykubelet.kube.errors import KubeError
from pykubelet.kube.events import WARNING, EventRecorder, pod_ref
from pykubelet.util.backoff import Backoff
from pykubelet.util.log import get_logger
from pykubelet.volumes.csi.csidriver import CsiDriverError, Get, fetch_driver_policy
from pykubelet.volumes.csi.in_flight import RETRY_INITIAL_SECONDS, RETRY_MAX_SECONDS, backoff_key
from pykubelet.volumes.csi.pv_setup import CsiSetupError

log = get_logger(__name__)

REPUBLISH_SECONDS = 60.0
"""How often a requiresRepublish driver's volumes are published again: the kubelet does it at
each pod sync, whose period (syncFrequency) is a minute by default."""


@dataclass(frozen=True)
class RepublishTarget:
    """A volume of a live pod, as it was set up."""

    pod: Pod
    spec_name: str
    """The name the kubelet's messages give the volume: the PV's, or the pod volume's for an inline one."""
    driver: str
    block: bool

    @property
    def key(self) -> str:
        return backoff_key(f"{self.pod.uid}/{self.spec_name}")


Targets = Callable[[], list[RepublishTarget]]
Publish = Callable[[RepublishTarget], Awaitable[CsiSetupError | None]]
"""Publish the volume again; its failure, None when done (or torn down meanwhile)."""


class CsiRepublisher:
    def __init__(self, targets: Targets, publish: Publish, get: Get, clock: Callable[[], float] = time.monotonic):
        self.targets = targets
        self.publish = publish
        self.get = get
        self.clock = clock
        self.recorder: EventRecorder | None = None
        """Where the failures' events go (the agent's recorder, once it runs the loop)."""
        self._retry = Backoff(RETRY_INITIAL_SECONDS, RETRY_MAX_SECONDS, clock)
        self._failed: set[str] = set()

    async def republish(self, periodic: bool = True) -> None:
        """Publish again each volume of a requiresRepublish driver that is due: at a period
        every one not backing off; between periods the failed ones whose back-off ended."""
        requires: dict[str, bool] = {}
        targets = self.targets()
        for key in self._failed - {t.key for t in targets}:  # torn down, or its pod is gone
            self._forget(key)
        for target in targets:
            if self._retry.in_backoff_since_update(target.key) or not (periodic or target.key in self._failed):
                continue
            if target.driver not in requires:
                requires[target.driver] = await self._requires_republish(target.driver)
            if not requires[target.driver]:
                self._forget(target.key)
                continue
            error = await self.publish(target)
            if error is None:
                self._forget(target.key)
            else:
                self._failed.add(target.key)
                self._retry.next(target.key, self.clock())
                self._report(target, error)

    def _forget(self, key: str) -> None:
        self._failed.discard(key)
        self._retry.forget(key)

    def next_retry_in(self) -> float | None:
        """Seconds until the first failed volume is due again; None when none failed."""
        return min((self._retry.remaining_since_update(k) for k in self._failed), default=None)

    async def _requires_republish(self, driver: str) -> bool:
        try:
            return (await fetch_driver_policy(self.get, driver)).requires_republish
        except (KubeError, CsiDriverError) as e:
            log.warning("Could not read a CSIDriver; its volumes are not republished now", driver=driver, err=str(e))
            return False

    def _report(self, target: RepublishTarget, error: CsiSetupError) -> None:
        pod = target.pod
        message = f'{error.operation} failed for volume "{target.spec_name}" : {error}'
        log.warning("Republishing a volume failed", pod=f"{pod.namespace}/{pod.name}", volume=target.spec_name,
                    err=message, retry_in=self._retry.delay(target.key))
        if self.recorder is not None:
            self.recorder.record(pod_ref(pod.namespace, pod.name, pod.uid), WARNING,
                                 "FailedMapVolume" if target.block else "FailedMount", message)

    async def run(self, period: float = REPUBLISH_SECONDS) -> None:
        """The republish loop: a pass every `period`, and the failed volumes' retries between."""
        next_pass = self.clock() + period
        while True:
            wait = next_pass - self.clock()
            retry_in = self.next_retry_in()
            await asyncio.sleep(max(0.0, wait if retry_in is None else min(wait, retry_in)))
            periodic = self.clock() >= next_pass
            if periodic:
                next_pass = self.clock() + period
            await self.republish(periodic)
