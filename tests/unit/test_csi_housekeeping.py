"""Housekeeping's CSI work never waits on a driver: a driver that does not answer holds up
neither the housekeeping pass nor another pod's teardown; its volume has one call in flight
at a time, which ends at the call's deadline and is then tried again with back-off."""

from __future__ import annotations

import asyncio
import contextlib
import os

import pytest

from pykubelet.api.pod import Pod
from pykubelet.volumes.claim_model import parse_volume
from pykubelet.volumes.csi.drivers import Driver, DriverRegistry
from pykubelet.volumes.csi.node_client import Capability, CsiNodeClient
from pykubelet.volumes.csi.operations import CsiNodeOperations
from pykubelet.volumes.csi.pod_volumes import CsiPodVolumes
from pykubelet.volumes.csi.pv_setup import CsiPersistentVolumes
from tests.helpers import wait_for
from tests.unit.csi_fakes import FakeApi, FakeNodeDriver, served_node_driver
from tests.fakes.clock import ManualClock

HANGING, ANSWERING = "hanging.csi.k8s.io", "answering.csi.k8s.io"
PASS_SECONDS = 5.0
"""Far more than a pass takes, far less than a driver call's deadline (two minutes)."""


def pv(driver: str, name: str) -> object:
    return parse_volume({"metadata": {"name": name}, "spec": {
        "accessModes": ["ReadWriteOnce"], "claimRef": {"uid": "c"}, "csi": {"driver": driver, "volumeHandle": name}}})


def pod(uid: str) -> Pod:
    return Pod(name=f"web-{uid}", namespace="default", uid=uid, containers=(), raw={"spec": {}})


@pytest.fixture
async def bed():
    """Pod u1 with a volume of the driver that will hang, pod u2 with one of a driver that answers."""
    hanging, answering = (FakeNodeDriver(capabilities=(Capability.STAGE_UNSTAGE_VOLUME,)) for _ in range(2))
    async with contextlib.AsyncExitStack() as stack:
        first = await stack.enter_async_context(served_node_driver(hanging, HANGING))
        second = await stack.enter_async_context(served_node_driver(answering, ANSWERING))
        first.drivers.add(Driver(ANSWERING, second.socket, (1, 0, 0)))
        api = FakeApi()
        for name in (HANGING, ANSWERING):
            api.put(f"/apis/storage.k8s.io/v1/csidrivers/{name}", {"spec": {"attachRequired": False}})
        clock = ManualClock()
        ops = CsiNodeOperations(os.path.join(first.root, "kubelet"), "node1", first.drivers)
        volumes = CsiPodVolumes(CsiPersistentVolumes(ops, api.get), api.get, clock)
        paths = {"u1": await volumes.set_up_pv(pod("u1"), "data", "data", pv(HANGING, "pvc-1"), read_only=False),
                 "u2": await volumes.set_up_pv(pod("u2"), "data", "data", pv(ANSWERING, "pvc-2"), read_only=False)}
        try:
            yield hanging, answering, volumes, clock, paths
        finally:
            await volumes.stop()


async def test_a_driver_that_does_not_answer_holds_up_neither_housekeeping_nor_other_pods(bed):
    hanging, answering, volumes, _, paths = bed
    hanging.hang.add("NodeUnpublishVolume")

    holding = await asyncio.wait_for(volumes.clean_up(set()), PASS_SECONDS)  # both pods are gone
    assert "u1" in holding
    await wait_for(lambda: "u2" not in volumes.holders(), PASS_SECONDS, "the other pod's volume unpublished")
    assert len(answering.calls("NodeUnpublishVolume")) == 1 and len(answering.calls("NodeUnstageVolume")) == 1
    assert not os.path.exists(paths["u2"])

    await wait_for(lambda: hanging.calls("NodeUnpublishVolume"), PASS_SECONDS, "the hanging driver asked")
    for _ in range(3):  # the next passes: still returning at once, and no second call for the same volume
        assert await asyncio.wait_for(volumes.clean_up(set()), PASS_SECONDS) == {"u1"}
    assert len(hanging.calls("NodeUnpublishVolume")) == 1
    assert os.path.isdir(paths["u1"])  # its pod's directory stays while the volume may be mounted


async def test_a_hanging_call_ends_at_its_deadline_and_is_tried_again_after_the_back_off(bed, monkeypatch):
    hanging, _, volumes, clock, paths = bed
    monkeypatch.setattr(DriverRegistry, "client", lambda self, name: CsiNodeClient(self.get(name).endpoint, 0.3))
    hanging.hang.add("NodeUnpublishVolume")

    await volumes.clean_up({"u2"})
    await asyncio.wait_for(volumes.settle(), PASS_SECONDS)  # the deadline ended the call
    assert volumes.holders() == {"u1", "u2"} and os.path.isdir(paths["u1"])
    await volumes.clean_up({"u2"})
    assert len(hanging.calls("NodeUnpublishVolume")) == 1  # backing off

    hanging.hang.clear()
    clock.now += 0.6
    await volumes.clean_up({"u2"})
    await asyncio.wait_for(volumes.settle(), PASS_SECONDS)
    assert len(hanging.calls("NodeUnpublishVolume")) == 2 and volumes.holders() == {"u2"}
    assert not os.path.exists(paths["u1"])


async def test_a_leftover_staging_whose_driver_does_not_answer_does_not_hold_up_housekeeping(bed):
    hanging, _, volumes, _, _ = bed
    await volumes.persistent.operations.unpublish("u1", "pvc-1")  # an agent that died before unstaging...
    restarted = CsiPodVolumes(CsiPersistentVolumes(volumes.persistent.operations, volumes.get), volumes.get)
    await restarted.reconstruct()  # ...and the next one finds the staging without pods
    hanging.hang.add("NodeUnstageVolume")
    try:
        assert await asyncio.wait_for(restarted.clean_up({"u2"}), PASS_SECONDS) == {"u2"}
        await wait_for(lambda: hanging.calls("NodeUnstageVolume"), PASS_SECONDS, "the unstage asked for")
        await asyncio.wait_for(restarted.clean_up({"u2"}), PASS_SECONDS)
        assert len(hanging.calls("NodeUnstageVolume")) == 1
    finally:
        await restarted.stop()
