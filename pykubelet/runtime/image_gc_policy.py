"""What image garbage collection decides, as the kubelet's image GC manager decides it: which images
are in use, what the agent remembers of each image, which unused ones go and in what order, and
how many bytes the image filesystem must lose. Pure: typed values in, typed values out
(runtime/image_gc.py lists, measures and removes).

An image is in use while any container of the runtime refers to it, running or not. In-use and
pinned images are never removed; the runtime's sandbox (pause) image counts as pinned, since a
runtime that does not pin it (containerd 1.x) would have to pull it again for the next pod, and
an offline node cannot. Of the rest, the least recently used go first.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterable, Mapping

from pykubelet.config.settings import ImageGCSettings
from pykubelet.cri.v1 import api_pb2 as api

REASON_AGE = "age"  # the kubelet's labels of image_garbage_collected_total
REASON_SPACE = "space"


@dataclass(frozen=True)
class ListedImage:
    """One image as the runtime lists it."""

    id: str
    size: int
    pinned: bool  # by the runtime, or the sandbox image


@dataclass(frozen=True)
class ImageRecord:
    """What the agent remembers of an image (in memory only: a restarted agent first sees every
    image again, as the kubelet does). Times are wall-clock seconds."""

    first_detected: float
    last_used: float  # 0: never seen in use since the agent started
    size: int
    pinned: bool


@dataclass(frozen=True)
class Candidate:
    """An image garbage collection may remove."""

    id: str
    record: ImageRecord


def collection_enabled(gc: ImageGCSettings) -> bool:
    """The kubelet starts no image GC when neither disk usage (high threshold 100) nor age can trigger it."""
    return gc.high_threshold_percent < 100 or gc.maximum_age > 0


def images_in_use(containers: Iterable[api.Container]) -> set[str]:
    """The image IDs the runtime's containers (any state) were made from. Runtimes before CRI
    image_id report the ID in image_ref."""
    return {c.image_id or c.image_ref for c in containers if c.image_id or c.image_ref}


def sandbox_image(status_info: Mapping[str, str]) -> str:
    """The sandbox image the runtime's verbose Status names: containerd 1.x `sandboxImage`,
    `pinnedImages.sandbox` where a runtime reports it; "" when it names none. (containerd 2.x's
    Status shows only its runtime half of the config; it marks the sandbox image pinned instead.)"""
    try:
        config = json.loads(status_info.get("config", "") or "{}")
    except ValueError:
        return ""
    if not isinstance(config, dict):
        return ""
    pinned = config.get("pinnedImages")
    image = config.get("sandboxImage") or (pinned.get("sandbox") if isinstance(pinned, dict) else "")
    return image if isinstance(image, str) else ""


def detect(records: Mapping[str, ImageRecord], listed: Iterable[ListedImage], in_use: set[str],
           now: float) -> dict[str, ImageRecord]:
    """The records after one look at the runtime: new images first detected now, images in use
    last used now, sizes and pins refreshed, images that are gone forgotten."""
    updated = {}
    for image in listed:
        old = records.get(image.id)
        updated[image.id] = ImageRecord(
            first_detected=old.first_detected if old else now,
            last_used=now if image.id in in_use else (old.last_used if old else 0.0),
            size=image.size, pinned=image.pinned)
    return updated


def eviction_order(records: Mapping[str, ImageRecord], in_use: set[str]) -> list[Candidate]:
    """Images neither in use nor pinned, least recently used first (ties: first detected first)."""
    candidates = [Candidate(image_id, record) for image_id, record in records.items()
                  if image_id not in in_use and not record.pinned]
    return sorted(candidates, key=lambda c: (c.record.last_used, c.record.first_detected))


def too_old(candidates: Iterable[Candidate], maximum_age: float, now: float, began: float) -> list[Candidate]:
    """Candidates unused for longer than imageMaximumGCAge. None before the agent has run that long
    itself: it has not watched the images long enough to know."""
    if maximum_age <= 0 or now - began <= maximum_age:
        return []
    return [c for c in candidates if now - c.record.last_used > maximum_age]


def old_enough(candidates: Iterable[Candidate], minimum_age: float, now: float) -> list[Candidate]:
    """Candidates that may go for space, in order: first detected at least imageMinimumGCAge ago
    (a younger one may have just been pulled for a container about to be made)."""
    return [c for c in candidates if now - c.record.first_detected >= minimum_age]


def usage_percent(capacity: int, available: int) -> int:
    """Used percent of the image filesystem as the kubelet rounds it (down, on what is available)."""
    return 100 - available * 100 // capacity


def bytes_to_free(capacity: int, available: int, gc: ImageGCSettings) -> int:
    """At or above the high threshold: the bytes that bring usage down to the low threshold; else 0."""
    if usage_percent(capacity, available) < gc.high_threshold_percent:
        return 0
    return capacity * (100 - gc.low_threshold_percent) // 100 - available


def shortfall_message(capacity: int, available: int, freed: int) -> str:
    """The kubelet's FreeDiskSpaceFailed message: removing every eligible image was not enough."""
    return (f"Insufficient free disk space on the node's image filesystem "
            f"({usage_percent(capacity, available)}% of {format_size(capacity)} used). "
            f"Failed to free sufficient space by deleting unused images (freed {freed} bytes). "
            f"Investigate disk usage, as it could be used by active images, logs, volumes, or other data.")


def format_size(size: int) -> str:
    """Bytes as the kubelet prints them in that message: 512 B, 1.5 KiB ... 2.0 TiB."""
    if size < 1024:
        return f"{size} B"
    for unit, scale in (("KiB", 1 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30)):
        if size < scale << 10:
            return f"{size / scale:.1f} {unit}"
    return f"{size / (1 << 40):.1f} TiB"
