"""The record of the node's last graceful shutdown, kept where and as the kubelet keeps it: the
JSON file `graceful_node_shutdown_state` in the root directory, {"startTime": ..., "endTime": ...}
in Go's time format (RFC 3339; Go's zero time for "not yet"). It is written when a shutdown
begins and again when it ends, and read when the agent starts, so that after the reboot
`kubelet_graceful_shutdown_start_time_seconds` and `..._end_time_seconds` say when the last
shutdown ran and whether it got to its end (an end of 0: the machine went before the pods were
done). Either agent reads the other's file.

Blocking file I/O: the shutdown manager runs load and store in a thread.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from datetime import datetime, timezone

from pykubelet.util import durable

FILE = "graceful_node_shutdown_state"
GO_ZERO_TIME = "0001-01-01T00:00:00Z"
FIELDS = (("startTime", "start"), ("endTime", "end"))
# Go writes up to nine fractional digits; Python's parser takes at most six
_FRACTION = re.compile(r"(\.\d{6})\d+")


class ShutdownStateError(ValueError):
    """The file is not a record the kubelet would write; says which file and field."""


@dataclass(frozen=True)
class ShutdownRecord:
    start: float | None = None
    """Unix seconds the last shutdown began at; None: no shutdown on record."""
    end: float | None = None
    """Unix seconds it ended at (the lock released); None: not (yet) ended."""


def path_in(root_dir: str) -> str:
    return os.path.join(root_dir, FILE)


def _go_time(seconds: float | None) -> str:
    if seconds is None:
        return GO_ZERO_TIME
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat().replace("+00:00", "Z")


def _seconds(text: object, path: str, field: str) -> float | None:
    if not isinstance(text, str):
        raise ShutdownStateError(f"{path}: {field} is not a time string: {text!r}")
    try:
        when = datetime.fromisoformat(_FRACTION.sub(r"\1", text))
    except ValueError:
        raise ShutdownStateError(f"{path}: {field} is not an RFC 3339 time: {text!r}") from None
    if when.tzinfo is None:
        raise ShutdownStateError(f"{path}: {field} has no time zone: {text!r}")
    return None if when.year == 1 else when.timestamp()  # Go's zero time, in any zone


def encode(record: ShutdownRecord) -> bytes:
    return json.dumps({key: _go_time(getattr(record, attr)) for key, attr in FIELDS}).encode()


def decode(data: bytes, path: str) -> ShutdownRecord:
    try:
        raw = json.loads(data)
    except ValueError as e:
        raise ShutdownStateError(f"{path}: not JSON: {e}") from None
    if not isinstance(raw, dict):
        raise ShutdownStateError(f"{path}: not a JSON object")
    # a missing key is Go's zero value, as encoding/json leaves it
    return ShutdownRecord(**{attr: _seconds(raw.get(key, GO_ZERO_TIME), path, key) for key, attr in FIELDS})


def load(path: str) -> ShutdownRecord:
    """The record in `path`; an empty one when there is no file (no shutdown yet)."""
    try:
        with open(path, "rb") as f:
            data = f.read(64 * 1024)  # the record is ~80 bytes: a bigger file is not one
    except FileNotFoundError:
        return ShutdownRecord()
    return decode(data, path)


def store(path: str, record: ShutdownRecord) -> None:
    """Atomic and durable: the machine may power off right after."""
    durable.write_file(path, encode(record), 0o644)
