"""The mount points this process sees, from /proc/self/mountinfo: the one place that reads it.

os.path.ismount misses a bind mount of the same filesystem (same device, and for a file no
parent inode to compare), and a pod's volumes are full of those: subPath binds, tmpfs volumes.
Blocking reads of procfs: call from a thread where the event loop must not wait.
"""

from __future__ import annotations

import os
import re

MOUNTINFO = "/proc/self/mountinfo"
_OCTAL = re.compile(r"\\([0-7]{3})")


def _unescape(field: str) -> str:
    # mountinfo writes space, tab, newline and backslash as \ooo (octal).
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


def mount_points() -> set[str]:
    """Every mount point of this mount namespace."""
    try:
        with open(MOUNTINFO, encoding="utf-8", errors="surrogateescape") as f:
            return {_unescape(line.split(" ")[4]) for line in f if line.count(" ") >= 5}
    except OSError:
        return set()


def mount_points_under(directory: str) -> set[str]:
    """Every mount point at or below `directory` (a resolved path)."""
    prefix = directory.rstrip("/") + "/"
    return {p for p in mount_points() if p == directory or p.startswith(prefix)}


def is_mount_point(path: str) -> bool:
    return os.path.realpath(path) in mount_points()
