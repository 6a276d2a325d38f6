"""The pods' CSI volumes measured by their drivers (NodeGetVolumeStats), for /stats/summary.

The kubelet's CSI metrics provider: a driver is asked only when its node service lists
GET_VOLUME_STATS (the other drivers' volumes have no figures, as with the kubelet), with the
volume's ID and its publish target. The kubelet measures each pod's volumes in the background
once a minute and its summary serves the latest figures, so a slow or failing driver never holds
up or breaks a summary. Here a measurement is served for REFRESH_SECONDS, every driver call has a
short deadline, all volumes are measured side by side, and a volume whose driver failed is left
out of that summary (the kubelet's way), with a log line.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Callable

from pykubelet.api.times import rfc3339
from pykubelet.util.log import get_logger
from pykubelet.volumes.csi.drivers import DriverNotRegistered, DriverRegistry
from pykubelet.volumes.csi.node_client import Capability, CsiCallError, CsiNodeClient, CsiStatsError, VolumeUsage

log = get_logger(__name__)

REFRESH_SECONDS = 60.0
"""How long a measurement is served: the kubelet's volume stats period (volumeStatsAggPeriod)."""
STATS_TIMEOUT = 5.0
"""Each driver call's deadline: a summary waits no longer than this for a driver."""


@dataclass(frozen=True)
class CsiInUse:
    """A CSI volume published for a pod."""

    volume: str
    """The pod's volume name."""
    spec_name: str
    """The PV's name, or the pod volume's for an inline volume: the directory under the pod's kubernetes.io~csi."""
    target_path: str
    driver: str
    volume_handle: str
    claim: str = ""
    """The PersistentVolumeClaim's name ("" for an inline volume)."""
    namespace: str = ""
    """The pod's (and its claim's) namespace."""
    block: bool = False
    """A raw block device (volumeMode Block); target_path is then its publish path."""

    @property
    def inline(self) -> bool:
        return not self.claim


def summary_entry(volume: CsiInUse, measured_at: float, usage: VolumeUsage) -> dict[str, Any]:
    """The volume's entry in a pod's `volume` list of the Summary API."""
    entry: dict[str, Any] = {
        "time": rfc3339(measured_at), "availableBytes": usage.available_bytes, "capacityBytes": usage.capacity_bytes,
        "usedBytes": usage.used_bytes, "inodesFree": usage.inodes_free, "inodes": usage.inodes,
        "inodesUsed": usage.inodes_used, "name": volume.volume}
    if volume.claim:
        entry["pvcRef"] = {"name": volume.claim, "namespace": volume.namespace}
    return entry


class CsiVolumeStats:
    """Measures the CSI volumes `in_use` lists for a pod UID, through the drivers in `drivers`."""

    def __init__(self, drivers: DriverRegistry, in_use: Callable[[str], list[CsiInUse]],
                 refresh_seconds: float = REFRESH_SECONDS, timeout: float = STATS_TIMEOUT,
                 clock: Callable[[], float] = time.monotonic):
        self.drivers = drivers
        self.in_use = in_use
        self.refresh_seconds = refresh_seconds
        self.timeout = timeout
        self.clock = clock
        # (pod UID, volume, volume ID) -> (clock reading, wall time, usage) of the last measurement
        self._last: dict[tuple[str, str, str], tuple[float, float, VolumeUsage]] = {}

    async def pods(self, uids: list[str]) -> dict[str, list[dict[str, Any]]]:
        """Pod UID -> the Summary API entries of its CSI volumes that could be measured."""
        volumes = [(uid, volume) for uid in uids for volume in self.in_use(uid)]
        keys = {(uid, v.volume, v.volume_handle) for uid, v in volumes}
        self._last = {key: value for key, value in self._last.items() if key in keys}  # pods and volumes gone
        measured = await asyncio.gather(*(self._measure(uid, volume) for uid, volume in volumes))
        out: dict[str, list[dict[str, Any]]] = {}
        for (uid, volume), result in zip(volumes, measured):
            if result is not None:
                out.setdefault(uid, []).append(summary_entry(volume, *result))
        return out

    async def _measure(self, uid: str, volume: CsiInUse) -> tuple[float, VolumeUsage] | None:
        """(when, usage) of the volume, measured now unless a recent measurement is kept; None
        when its driver does not measure volumes or failed to."""
        key = (uid, volume.volume, volume.volume_handle)
        now = self.clock()
        last = self._last.get(key)
        if last is not None and now - last[0] < self.refresh_seconds:
            return last[1], last[2]
        try:
            client = CsiNodeClient(self.drivers.get(volume.driver).endpoint, self.timeout)
            if Capability.GET_VOLUME_STATS not in await client.node_get_capabilities():
                return None
            usage = await client.node_get_volume_stats(volume.volume_handle, volume.target_path)
        except (DriverNotRegistered, CsiCallError, CsiStatsError) as e:
            log.warning("Failed to calculate volume metrics", pod_uid=uid, volume=volume.volume, driver=volume.driver,
                        err=str(e))
            return None
        measured_at = time.time()
        self._last[key] = (now, measured_at, usage)
        return measured_at, usage
