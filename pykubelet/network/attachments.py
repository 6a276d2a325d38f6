"""What the agent attached to each pod sandbox, one JSON file per sandbox (container ID).

The record is how a restarted agent still knows every pod's IP, answers CHECK, and DELs with
the result it got at ADD (the prevResult the plugins want).
"""

from __future__ import annotations

import json
import os
from typing import Any

from pykubelet.cni.request import CONTAINER_ID
from pykubelet.network.assets import write_atomically


class AttachmentRecords:
    def __init__(self, directory: str):
        self.directory = directory

    def _path(self, container_id: str) -> str:
        if not CONTAINER_ID.match(container_id):
            raise ValueError(f"CNI_CONTAINERID {container_id!r} is not a valid container ID")
        return os.path.join(self.directory, f"{container_id}.json")

    def save(self, container_id: str, record: dict[str, Any]) -> None:
        write_atomically(self._path(container_id), json.dumps(record).encode(), 0o600)

    def load(self, container_id: str) -> dict[str, Any] | None:
        try:
            with open(self._path(container_id), encoding="utf-8") as f:
                return json.load(f)
        except FileNotFoundError:
            return None
        except ValueError:
            return None  # a torn record: DEL still runs, without prevResult

    def remove(self, container_id: str) -> None:
        try:
            os.unlink(self._path(container_id))
        except FileNotFoundError:
            pass

    def written(self, container_id: str) -> float:
        """When the record was written (0 when there is none)."""
        try:
            return os.stat(self._path(container_id)).st_mtime
        except FileNotFoundError:
            return 0.0

    def ids(self) -> set[str]:
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return set()
        return {n[:-5] for n in names if n.endswith(".json")}
