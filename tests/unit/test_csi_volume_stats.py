"""The pods' CSI volumes measured by their drivers (served in-process) for /stats/summary: only a
driver that offers GET_VOLUME_STATS is asked, a failing or missing driver leaves out its volume
alone, and a measurement is served again until it is a minute old."""

from __future__ import annotations


import grpc
import pytest

from pykubelet.volumes.csi.node_client import Capability
from pykubelet.volumes.csi.v1 import csi_pb2 as csi
from pykubelet.volumes.csi.volume_stats import CsiInUse, CsiVolumeStats
from tests.unit.csi_fakes import FakeNodeDriver, served_node_driver
from tests.fakes.clock import ManualClock

DRIVER = "hostpath.csi.k8s.io"
GiB = 2**30
CLAIMED = CsiInUse("data", "pvc-1", "/var/lib/kubelet/pods/u1/volumes/kubernetes.io~csi/pvc-1/mount", DRIVER,
                   "vol-1", claim="data-db-0", namespace="shop")
INLINE = CsiInUse("scratch", "scratch", "/var/lib/kubelet/pods/u1/volumes/kubernetes.io~csi/scratch/mount", DRIVER,
                  "csi-abc")


@pytest.fixture
async def bed():
    node = FakeNodeDriver(capabilities=(Capability.STAGE_UNSTAGE_VOLUME, Capability.GET_VOLUME_STATS))
    node.usage = [csi.VolumeUsage(unit=csi.VolumeUsage.BYTES, available=3 * GiB, total=4 * GiB, used=GiB),
                  csi.VolumeUsage(unit=csi.VolumeUsage.INODES, available=900, total=1000, used=100)]
    async with served_node_driver(node, DRIVER) as served:
        in_use = {"u1": [CLAIMED, INLINE]}
        clock = ManualClock()
        yield node, CsiVolumeStats(served.drivers, lambda uid: in_use.get(uid, []), clock=clock), in_use, clock


async def test_each_volume_is_reported_by_its_pod_volume_name_with_the_claim_it_comes_from(bed):
    node, stats, _, _ = bed
    measured = await stats.pods(["u1", "u2"])
    assert list(measured) == ["u1"]
    by_name = {entry["name"]: entry for entry in measured["u1"]}
    figures = {k: v for k, v in by_name["data"].items() if k not in ("time", "name", "pvcRef")}
    assert figures == {"availableBytes": 3 * GiB, "capacityBytes": 4 * GiB, "usedBytes": GiB,
                       "inodesFree": 900, "inodes": 1000, "inodesUsed": 100}
    assert by_name["data"]["pvcRef"] == {"name": "data-db-0", "namespace": "shop"}
    assert "pvcRef" not in by_name["scratch"]
    asked = {(r.volume_id, r.volume_path) for r in node.calls("NodeGetVolumeStats")}
    assert asked == {("vol-1", CLAIMED.target_path), ("csi-abc", INLINE.target_path)}


async def test_a_driver_that_does_not_measure_volumes_is_not_asked(bed):
    node, stats, _, _ = bed
    node.capabilities = (Capability.STAGE_UNSTAGE_VOLUME,)
    assert await stats.pods(["u1"]) == {}
    assert node.calls("NodeGetVolumeStats") == []


async def test_a_failing_or_missing_driver_leaves_out_only_its_volumes(bed):
    node, stats, in_use, _ = bed
    node.fail["NodeGetVolumeStats"] = grpc.StatusCode.INTERNAL
    in_use["u2"] = [CsiInUse("other", "other", "/x/mount", "gone.csi.k8s.io", "vol-9")]
    assert await stats.pods(["u1", "u2"]) == {}
    del node.fail["NodeGetVolumeStats"]
    node.usage = []  # an answer without figures is a failure too
    assert await stats.pods(["u1"]) == {}


async def test_a_measurement_is_served_for_a_minute_then_taken_again(bed):
    node, stats, in_use, clock = bed
    first = await stats.pods(["u1"])
    clock.now += 59
    assert await stats.pods(["u1"]) == first
    assert len(node.calls("NodeGetVolumeStats")) == 2  # one per volume
    clock.now += 2
    node.usage = [csi.VolumeUsage(unit=csi.VolumeUsage.BYTES, available=GiB, total=4 * GiB, used=3 * GiB)]
    again = await stats.pods(["u1"])
    assert len(node.calls("NodeGetVolumeStats")) == 4
    assert {e["name"]: (e["usedBytes"], e["inodes"]) for e in again["u1"]} == {"data": (3 * GiB, 0),
                                                                              "scratch": (3 * GiB, 0)}
