"""Image garbage collection, acting on what runtime/image_gc_policy.py decides: every period it lists
the images and containers, measures the image filesystem, and removes unused images, as the
kubelet's image GC manager does (the period is the kubelet's ImageGCPeriod, 5 minutes).

A round first removes images unused for longer than imageMaximumGCAge (when set), then, when the
image filesystem is at least imageGCHighThresholdPercent full, removes images (least recently used
first, none first seen less than imageMinimumGCAge ago) until usage is down to
imageGCLowThresholdPercent. A round that fails is logged; the second failure in a row and every
one after it is also a Warning Event `ImageGCFailed` on the Node.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Callable, Protocol

from pykubelet.config.settings import ImageGCSettings
from pykubelet.cri import errors
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.kube.events import WARNING, EventRecorder, node_ref
from pykubelet.runtime import image_gc_policy as policy
from pykubelet.util import metrics
from pykubelet.util.durations import format_duration
from pykubelet.util.log import get_logger

log = get_logger(__name__)

IMAGE_GC_PERIOD = 300.0  # the kubelet's ImageGCPeriod

# The kubelet's Event reasons.
IMAGE_GC_FAILED = "ImageGCFailed"
FREE_DISK_SPACE_FAILED = "FreeDiskSpaceFailed"
INVALID_DISK_CAPACITY = "InvalidDiskCapacity"


class ImageRuntime(Protocol):
    """The CRI calls image garbage collection makes (cri.client.CRIClient has them)."""

    async def status(self, verbose: bool = False) -> api.StatusResponse: ...

    async def list_images(self) -> list[api.Image]: ...

    async def image_status(self, image: str) -> api.Image | None: ...

    async def list_containers(self, label_selector: dict[str, str] | None = None) -> list[api.Container]: ...

    async def image_fs_info(self) -> api.ImageFsInfoResponse: ...

    async def remove_image(self, image: str) -> None: ...


class ImageGCError(Exception):
    """A round of image garbage collection did not do what the policy asks."""


def filesystem_size(path: str) -> tuple[int, int]:
    """(capacity, available) bytes of the filesystem holding path; blocking: run it off the loop."""
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def build_image_gc(runtime: ImageRuntime, gc: ImageGCSettings, recorder: EventRecorder,
                   node_name: str) -> ImageGC | None:
    """The node's image GC, its Events on the Node; None when the settings leave it nothing to do."""
    if not policy.collection_enabled(gc):
        log.info("ImageGCHighThresholdPercent is set 100 and ImageMaximumGCAge is 0, Disable image GC")
        return None
    return ImageGC(runtime, gc, lambda reason, message: recorder.record(node_ref(node_name), WARNING, reason, message))


class ImageGC:
    def __init__(self, runtime: ImageRuntime, gc: ImageGCSettings, warn: Callable[[str, str], None], *,
                 clock: Callable[[], float] = time.time, period: float = IMAGE_GC_PERIOD):
        self.runtime = runtime
        self.gc = gc
        self.warn = warn  # (reason, message): a Warning Event on the Node
        self.clock = clock
        self.period = period
        self.records: dict[str, policy.ImageRecord] = {}

    async def run(self) -> None:
        """Collect now and every period, until cancelled; a failed round never ends the loop."""
        began = self.clock()
        failed_before = False
        while True:
            try:
                await self.collect(began)
            except (ImageGCError, errors.CRIError) as e:
                if failed_before:
                    log.error("Image garbage collection failed multiple times in a row", err=str(e))
                    self.warn(IMAGE_GC_FAILED, str(e))
                else:
                    log.error("Image garbage collection failed once. Stats initialization may not have completed "
                              "yet", err=str(e))
                failed_before = True
            else:
                (log.info if failed_before else log.debug)("Image garbage collection succeeded")
                failed_before = False
            await asyncio.sleep(self.period)

    async def collect(self, began: float) -> None:
        """One round (the kubelet's GarbageCollect); `began` is when the agent started collecting."""
        now = self.clock()
        in_use = await self.detect(now)
        candidates = policy.eviction_order(self.records, in_use)
        old = policy.too_old(candidates, self.gc.maximum_age, now, began)
        failures = [error for c in old if (error := await self._remove(c, policy.REASON_AGE))]
        if failures:
            raise ImageGCError(f"wanted to free images older than {format_duration(self.gc.maximum_age)}, "
                               f"encountered errors in image deletion: {', '.join(failures)}")
        gone = {c.id for c in old}
        capacity, available = await self._image_fs()
        to_free = policy.bytes_to_free(capacity, available, self.gc)
        if to_free <= 0:
            return
        log.info("Disk usage on image filesystem is over the high threshold, trying to free bytes down to the low "
                 "threshold", usage=policy.usage_percent(capacity, available),
                 highThreshold=self.gc.high_threshold_percent, amountToFree=to_free,
                 lowThreshold=self.gc.low_threshold_percent)
        freed, failures = 0, []
        for candidate in policy.old_enough((c for c in candidates if c.id not in gone), self.gc.minimum_age, now):
            if error := await self._remove(candidate, policy.REASON_SPACE):
                failures.append(error)
                continue
            freed += candidate.record.size
            if freed >= to_free:
                break
        if failures:
            raise ImageGCError(f"wanted to free {to_free} bytes, but freed {freed} bytes space with errors in image "
                               f"deletion: {', '.join(failures)}")
        if freed < to_free:
            message = policy.shortfall_message(capacity, available, freed)
            self.warn(FREE_DISK_SPACE_FAILED, message)
            raise ImageGCError(message)

    async def delete_unused_images(self) -> None:
        """Remove every unused image not first seen within imageMinimumGCAge (the kubelet's
        DeleteUnusedImages: the eviction manager's reclaim of disk before it evicts pods)."""
        now = self.clock()
        in_use = await self.detect(now)
        for candidate in policy.old_enough(policy.eviction_order(self.records, in_use), self.gc.minimum_age, now):
            await self._remove(candidate, policy.REASON_SPACE)

    async def detect(self, now: float) -> set[str]:
        """Look at the runtime's images and containers, update the records; the image IDs in use."""
        images = await self.runtime.list_images()
        in_use = policy.images_in_use(await self.runtime.list_containers())
        sandbox = await self._sandbox_image_id()
        listed = [policy.ListedImage(i.id, i.size, i.pinned or i.id == sandbox) for i in images]
        self.records = policy.detect(self.records, listed, in_use, now)
        return in_use

    async def _sandbox_image_id(self) -> str:
        """The ID of the runtime's sandbox image, "" when it names none or does not have it."""
        reference = policy.sandbox_image(dict((await self.runtime.status(verbose=True)).info))
        if not reference:
            return ""
        image = await self.runtime.image_status(reference)
        return image.id if image is not None else ""

    async def _image_fs(self) -> tuple[int, int]:
        """(capacity, available) of the filesystem the runtime keeps images on: the runtime names
        it (ImageFsInfo), statvfs measures it, as the kubelet's CRI stats provider does."""
        filesystems = (await self.runtime.image_fs_info()).image_filesystems
        if not filesystems:
            raise ImageGCError("imageFs information is unavailable")
        mountpoint = filesystems[0].fs_id.mountpoint
        try:
            capacity, available = await asyncio.to_thread(filesystem_size, mountpoint)
        except OSError as e:
            log.warning("Cannot measure the image filesystem", path=mountpoint, err=str(e))
            capacity = available = 0
        if capacity <= 0:
            message = "invalid capacity 0 on image filesystem"
            self.warn(INVALID_DISK_CAPACITY, message)
            raise ImageGCError(message)
        if available > capacity:
            log.info("Availability is larger than capacity", available=available, capacity=capacity)
            available = capacity
        return capacity, available

    async def _remove(self, candidate: policy.Candidate, reason: str) -> str:
        """Remove one image (by ID: every tag of it goes); what went wrong, "" when nothing did."""
        log.info("Removing image to free bytes", imageID=candidate.id, size=candidate.record.size)
        try:
            await self.runtime.remove_image(candidate.id)
        except errors.CRIError as e:
            log.warning("Failed to remove image", imageID=candidate.id, err=str(e))
            return f"{candidate.id}: {e}"
        self.records.pop(candidate.id, None)
        metrics.IMAGE_GARBAGE_COLLECTED.labels(reason).inc()
        return ""
