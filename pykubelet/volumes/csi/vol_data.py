"""vol_data.json: what the agent remembers about a staged or published CSI volume.

The file the kubelet writes next to a staging directory ({"driverName", "volumeHandle"}) and next
to a pod's publish target (plus "specVolID", "nodeName", "attachmentID", "volumeLifecycleMode"),
so that tearing a volume down (and finding it after a restart) needs no API object. The bytes are
what Go's JSON encoder writes for a map of strings: sorted keys, no spaces, '<', '>' and '&'
escaped, one trailing newline. Reads and writes are blocking: call them off the event loop.
"""

from __future__ import annotations

import json
import os
from typing import Any

from pykubelet.util.durable import write_file
from pykubelet.volumes.csi.paths import VOL_DATA_FILE, attachment_name

DRIVER_NAME = "driverName"
VOLUME_HANDLE = "volumeHandle"
SPEC_VOLUME_ID = "specVolID"
NODE_NAME = "nodeName"
ATTACHMENT_ID = "attachmentID"
LIFECYCLE_MODE = "volumeLifecycleMode"

PERSISTENT = "Persistent"
EPHEMERAL = "Ephemeral"

_GO_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
FILE_MODE = 0o644
"""os.Create's 0666 under the usual umask 022, as the kubelet's file ends up."""


class VolDataError(Exception):
    """A vol_data.json that cannot be read as a map of strings; the message names the file."""


def staged_data(driver: str, volume_handle: str) -> dict[str, str]:
    """What the staging directory's vol_data.json holds."""
    return {VOLUME_HANDLE: volume_handle, DRIVER_NAME: driver}


def published_data(spec_name: str, driver: str, volume_handle: str, node_name: str,
                   lifecycle_mode: str) -> dict[str, str]:
    """What a pod's published volume's vol_data.json holds."""
    return {SPEC_VOLUME_ID: spec_name, VOLUME_HANDLE: volume_handle, DRIVER_NAME: driver,
            NODE_NAME: node_name, LIFECYCLE_MODE: lifecycle_mode,
            ATTACHMENT_ID: attachment_name(volume_handle, driver, node_name)}


def block_data(spec_name: str, driver: str, volume_handle: str, node_name: str) -> dict[str, str]:
    """What a block volume's data directory's vol_data.json holds (no lifecycle mode: only
    persistent volumes are block volumes)."""
    return {SPEC_VOLUME_ID: spec_name, VOLUME_HANDLE: volume_handle, DRIVER_NAME: driver, NODE_NAME: node_name,
            ATTACHMENT_ID: attachment_name(volume_handle, driver, node_name)}


def go_json(value: Any) -> str:
    """What Go's json.Marshal writes for value (objects in the order given: Go sorts a map's
    keys, and keeps a struct's fields in their declared order)."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    for raw, escaped in _GO_ESCAPES.items():
        text = text.replace(raw, escaped)  # these characters only ever occur inside strings
    return text


def encode(data: dict[str, str]) -> bytes:
    """The bytes Go's json.Encoder writes for a map[string]string."""
    return (go_json(dict(sorted(data.items()))) + "\n").encode()


def save(directory: str, data: dict[str, str]) -> None:
    """Write directory/vol_data.json (blocking)."""
    write_file(os.path.join(directory, VOL_DATA_FILE), encode(data), FILE_MODE)


def load(directory: str) -> dict[str, str] | None:
    """directory/vol_data.json's map; None when there is no such file (blocking)."""
    path = os.path.join(directory, VOL_DATA_FILE)
    try:
        # O_NOFOLLOW: the directory is the agent's, but a pod-visible mount below it must not
        # be able to point the read anywhere else.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise VolDataError(f"failed to open volume data file [{path}]: {e}") from None
    with os.fdopen(fd, "rb") as f:
        raw = f.read(1 << 20)
    try:
        data = json.loads(raw)
    except ValueError as e:
        raise VolDataError(f"failed to parse volume data file [{path}]: {e}") from None
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise VolDataError(f"failed to parse volume data file [{path}]: expected an object of strings")
    return data
