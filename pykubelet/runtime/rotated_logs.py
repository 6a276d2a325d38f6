"""Which of a container's log files a rotation removes, compresses and creates (the kubelet's
container log manager rules), computed from file names alone.

Next to the live file `<log>` (the name CRI `log_path` gives), a rotation leaves `<log>.<time>`
(renamed, not compressed, so a reader still at its end can finish it) and `<log>.<time>.gz` for
the older ones. `<log>.<time>.tmp` is a compression cut short; a `<log>.<time>` next to its own
`.gz` is one whose compressed copy was written but whose removal was cut short: both are left-overs.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

TIMESTAMP_FORMAT = "%Y%m%d-%H%M%S"  # the kubelet's Go layout 20060102-150405
COMPRESSED_SUFFIX = ".gz"
TEMPORARY_SUFFIX = ".tmp"


def rotated_names(log_name: str, names: list[str]) -> list[str]:
    """The rotated files of `log_name` among a directory's names: `<log>.<anything>`."""
    prefix = log_name + "."
    return [n for n in names if n.startswith(prefix) and len(n) > len(prefix)]


def is_in_use(name: str, names: list[str]) -> bool:
    """Not a left-over: temporary files never are; an uncompressed file with a `.gz` twin is."""
    if name.endswith(TEMPORARY_SUFFIX):
        return False
    if name.endswith(COMPRESSED_SUFFIX):
        return True
    return name + COMPRESSED_SUFFIX not in names


def rotated_name(log_name: str, now: datetime) -> str:
    """`<log>.<YYYYMMDD-hhmmss>` in UTC, so the names sort oldest first in any season."""
    return f"{log_name}.{now.astimezone(timezone.utc).strftime(TIMESTAMP_FORMAT)}"


@dataclass(frozen=True)
class RotationPlan:
    """What one rotation does to the rotated files, in this order, before it renames the live file."""

    remove: tuple[str, ...]
    """Left-overs, then the oldest files beyond max_files - 2."""
    compress: tuple[str, ...]
    """The uncompressed rotated files that stay: each becomes `<name>.gz`."""
    kept: tuple[str, ...]
    """Every rotated file that stays, oldest first (compressed ones under their `.gz` name)."""


def plan_rotation(rotated: list[str], max_files: int) -> RotationPlan:
    """The kubelet's cleanupUnusedLogs, removeExcessLogs and compression, for `rotated` (the
    names rotated_names gave). Beside the live file and the one this rotation renames, at most
    max_files - 2 rotated files may stay; the oldest go first (a follower reads the newest)."""
    in_use = sorted(n for n in rotated if is_in_use(n, rotated))
    unused = sorted(n for n in rotated if not is_in_use(n, rotated))
    cut = max(len(in_use) - max(max_files - 2, 0), 0)
    excess, staying = in_use[:cut], in_use[cut:]
    compress = tuple(n for n in staying if not n.endswith(COMPRESSED_SUFFIX))
    kept = tuple(n if n.endswith(COMPRESSED_SUFFIX) else n + COMPRESSED_SUFFIX for n in staying)
    return RotationPlan(remove=tuple(unused + excess), compress=compress, kept=kept)


def name_taken(name: str, names: list[str]) -> bool:
    """A rotation within the same second as the last one would overwrite its file (or, once that
    one is compressed, make it look like a left-over): it waits for the next round instead."""
    return name in names or name + COMPRESSED_SUFFIX in names
