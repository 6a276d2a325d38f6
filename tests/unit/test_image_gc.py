"""Image garbage collection against a fake runtime: what a round removes and keeps, the Events and
errors of a round that cannot do its job, and the loop that repeats it."""

from __future__ import annotations

import asyncio
import inspect
import json
import threading

import pytest

from pykubelet.config.settings import ImageGCSettings
from pykubelet.cri import errors
from pykubelet.cri.client import CRIClient
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.kube.events import EventRecorder
from pykubelet.runtime import image_gc
from pykubelet.runtime.image_gc import ImageGC, ImageGCError, ImageRuntime, build_image_gc
from tests.helpers import wait_for
from tests.fakes.clock import ManualClock

MIB = 1 << 20
PAUSE = "registry.k8s.io/pause:3.9"
MOUNTPOINT = "/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs"


class FakeImageRuntime:
    """Images by ID, containers, the sandbox image in Status, and an image filesystem at MOUNTPOINT."""

    def __init__(self) -> None:
        self.images: dict[str, api.Image] = {}
        self.containers: list[api.Container] = []
        self.removed: list[str] = []
        self.refuse: set[str] = set()  # IDs whose removal fails
        self.filesystems = [api.FilesystemUsage(fs_id=api.FilesystemIdentifier(mountpoint=MOUNTPOINT))]

    def add(self, image_id: str, size: int, tag: str, pinned: bool = False) -> None:
        self.images[image_id] = api.Image(id=image_id, size=size, repo_tags=[tag], pinned=pinned)

    def use(self, image_id: str, state: int = api.CONTAINER_RUNNING) -> None:
        self.containers.append(api.Container(id=f"c{len(self.containers)}", image_id=image_id, state=state))

    async def status(self, verbose: bool = False) -> api.StatusResponse:
        return api.StatusResponse(info={"config": json.dumps({"sandboxImage": PAUSE})})

    async def list_images(self) -> list[api.Image]:
        return list(self.images.values())

    async def image_status(self, image: str) -> api.Image | None:
        return next((i for i in self.images.values() if image in i.repo_tags), None)

    async def list_containers(self, label_selector=None) -> list[api.Container]:
        return list(self.containers)

    async def image_fs_info(self) -> api.ImageFsInfoResponse:
        return api.ImageFsInfoResponse(image_filesystems=self.filesystems)

    async def remove_image(self, image: str) -> None:
        if image in self.refuse:
            raise errors.CRIError("RemoveImage", None, f"image {image} is locked")
        self.removed.append(image)
        self.images.pop(image, None)


class Disk:
    """The image filesystem's size as statvfs reports it, and the threads it was measured on."""

    def __init__(self, capacity: int, available: int) -> None:
        self.capacity, self.available = capacity, available
        self.measured_on: list[threading.Thread] = []
        self.paths: list[str] = []

    def __call__(self, path: str) -> tuple[int, int]:
        self.measured_on.append(threading.current_thread())
        self.paths.append(path)
        return self.capacity, self.available


@pytest.fixture
def runtime() -> FakeImageRuntime:
    rt = FakeImageRuntime()
    rt.add("sha256:pause", 1 * MIB, PAUSE)  # the sandbox image: containerd 1.x does not pin it
    rt.add("sha256:app", 30 * MIB, "docker.io/library/app:1")
    rt.add("sha256:pinned", 40 * MIB, "registry.k8s.io/pinned:1", pinned=True)
    rt.add("sha256:old-a", 10 * MIB, "docker.io/library/old-a:1")
    rt.add("sha256:old-b", 20 * MIB, "docker.io/library/old-b:1")
    rt.add("sha256:exited-user", 50 * MIB, "docker.io/library/job:1")
    rt.use("sha256:app")
    rt.use("sha256:exited-user", api.CONTAINER_EXITED)
    return rt


def gc_with(runtime: FakeImageRuntime, disk: Disk, monkeypatch, clock: ManualClock, **settings) -> tuple[ImageGC, list]:
    monkeypatch.setattr(image_gc, "filesystem_size", disk)
    events: list[tuple[str, str]] = []
    gc = ImageGC(runtime, ImageGCSettings(**settings), lambda reason, message: events.append((reason, message)),
                 clock=clock)
    return gc, events


async def test_over_the_high_threshold_it_removes_unused_images_until_down_to_the_low_one(runtime, monkeypatch):
    clock = ManualClock(10_000.0)
    # 1000 MiB, 150 available: 85% used; the low threshold 84% needs 10 MiB: old-a (first detected
    # first, so first in line among the never-used) is enough
    gc, events = gc_with(runtime, Disk(1000 * MIB, 150 * MIB), monkeypatch, clock, high_threshold_percent=85,
                         low_threshold_percent=84, minimum_age=0)
    await gc.detect(clock.now - 60)  # old-a .. seen earlier than a later image
    runtime.add("sha256:new", 5 * MIB, "docker.io/library/new:1")
    await gc.collect(began=clock.now)
    assert runtime.removed == ["sha256:old-a"]
    assert events == []


async def test_it_never_removes_an_image_in_use_pinned_or_the_sandbox_image(runtime, monkeypatch):
    clock = ManualClock(10_000.0)
    disk = Disk(1000 * MIB, 0)  # full: everything that may go, goes
    gc, events = gc_with(runtime, disk, monkeypatch, clock, minimum_age=0)
    with pytest.raises(ImageGCError):
        await gc.collect(began=clock.now)
    assert sorted(runtime.removed) == ["sha256:old-a", "sha256:old-b"]
    assert set(runtime.images) == {"sha256:pause", "sha256:app", "sha256:pinned", "sha256:exited-user"}
    assert set(gc.records) == set(runtime.images)  # removed images are forgotten
    # the filesystem the runtime names was measured, off the event loop
    assert disk.paths == [MOUNTPOINT] and threading.main_thread() not in disk.measured_on
    assert [reason for reason, _ in events] == ["FreeDiskSpaceFailed"]


async def test_freeing_too_little_is_a_free_disk_space_failed_event_and_an_error(runtime, monkeypatch):
    clock = ManualClock(10_000.0)
    gc, events = gc_with(runtime, Disk(1000 * MIB, 100 * MIB), monkeypatch, clock, minimum_age=0)
    with pytest.raises(ImageGCError) as failed:
        await gc.collect(began=clock.now)
    message = ("Insufficient free disk space on the node's image filesystem (90% of 1000.0 MiB used). Failed to "
               "free sufficient space by deleting unused images (freed 31457280 bytes). Investigate disk usage, as "
               "it could be used by active images, logs, volumes, or other data.")
    assert events == [("FreeDiskSpaceFailed", message)] and str(failed.value) == message


async def test_images_younger_than_the_minimum_age_wait(runtime, monkeypatch):
    clock = ManualClock(10_000.0)
    gc, events = gc_with(runtime, Disk(1000 * MIB, 150 * MIB), monkeypatch, clock, low_threshold_percent=84,
                         minimum_age=120)
    with pytest.raises(ImageGCError):
        await gc.collect(began=clock.now)  # every image was first seen just now
    assert runtime.removed == []
    clock.now += 120
    await gc.collect(began=clock.now - 120)
    assert runtime.removed == ["sha256:old-a"]


async def test_below_the_high_threshold_nothing_is_removed(runtime, monkeypatch):
    clock = ManualClock(10_000.0)
    gc, events = gc_with(runtime, Disk(1000 * MIB, 160 * MIB), monkeypatch, clock, minimum_age=0)  # 84%
    await gc.collect(began=clock.now)
    assert runtime.removed == [] and events == []


async def test_maximum_age_removes_long_unused_images_whatever_the_usage(runtime, monkeypatch):
    clock = ManualClock(10_000.0)
    gc, events = gc_with(runtime, Disk(1000 * MIB, 900 * MIB), monkeypatch, clock, maximum_age=3600)
    began = clock.now
    await gc.collect(began)
    assert runtime.removed == []  # the agent has not watched the images for an hour yet
    clock.now += 1800
    runtime.use("sha256:old-b")  # old-b is used half an hour in, then its container goes
    await gc.collect(began)
    runtime.containers.pop()
    clock.now += 1801
    await gc.collect(began)
    assert runtime.removed == ["sha256:old-a"]  # never used; old-b was used 1801 s ago
    clock.now += 1800
    await gc.collect(began)
    assert runtime.removed == ["sha256:old-a", "sha256:old-b"]


async def test_a_removal_the_runtime_refuses_does_not_stop_the_others(runtime, monkeypatch):
    clock = ManualClock(10_000.0)
    runtime.refuse.add("sha256:old-a")
    gc, events = gc_with(runtime, Disk(1000 * MIB, 150 * MIB), monkeypatch, clock, low_threshold_percent=84,
                         minimum_age=0)
    with pytest.raises(ImageGCError, match=r"wanted to free 10485760 bytes, but freed 20971520 bytes space with "
                                           r"errors in image deletion: sha256:old-a: .*locked"):
        await gc.collect(began=clock.now)
    assert runtime.removed == ["sha256:old-b"]


async def test_an_image_filesystem_without_capacity_is_an_invalid_disk_capacity_event(runtime, monkeypatch):
    clock = ManualClock(10_000.0)
    gc, events = gc_with(runtime, Disk(0, 0), monkeypatch, clock)
    with pytest.raises(ImageGCError, match="invalid capacity 0 on image filesystem"):
        await gc.collect(began=clock.now)
    assert events == [("InvalidDiskCapacity", "invalid capacity 0 on image filesystem")]
    runtime.filesystems = []
    with pytest.raises(ImageGCError, match="imageFs information is unavailable"):
        await gc.collect(began=clock.now)


async def test_the_loop_reports_a_failure_as_an_event_only_when_it_repeats(runtime, monkeypatch, caplog):
    gc, events = gc_with(runtime, Disk(0, 0), monkeypatch, ManualClock(10_000.0))
    gc.period = 0.01
    task = asyncio.create_task(gc.run())
    try:
        await wait_for(lambda: sum(reason == "ImageGCFailed" for reason, _ in events) >= 2, 5,
                       "two ImageGCFailed events")
        assert events[:3] == [("InvalidDiskCapacity", "invalid capacity 0 on image filesystem"),  # the first round
                              ("InvalidDiskCapacity", "invalid capacity 0 on image filesystem"),  # the second
                              ("ImageGCFailed", "invalid capacity 0 on image filesystem")]
        assert "Image garbage collection failed once" in caplog.text
        assert "Image garbage collection failed multiple times in a row" in caplog.text
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled()  # the agent's stop ends it


def test_nothing_runs_when_neither_usage_nor_age_can_trigger_a_collection():
    recorder = EventRecorder(None, "n1")
    assert build_image_gc(FakeImageRuntime(), ImageGCSettings(high_threshold_percent=100), recorder, "n1") is None
    assert build_image_gc(FakeImageRuntime(), ImageGCSettings(), recorder, "n1") is not None


@pytest.mark.parametrize("implementation", [CRIClient, FakeImageRuntime])
@pytest.mark.parametrize("call", [name for name, value in vars(ImageRuntime).items()
                                  if callable(value) and not name.startswith("_")])
def test_the_client_and_the_fake_offer_every_call_collection_makes(implementation, call):
    wanted = list(inspect.signature(getattr(ImageRuntime, call)).parameters)
    assert list(inspect.signature(getattr(implementation, call)).parameters) == wanted
