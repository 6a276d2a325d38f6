"""The node's resource pressure conditions, as the eviction manager reports them
(node/eviction.py decides them from its thresholds and the pressure transition period)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from pykubelet.api.eviction import Threshold

__all__ = ["Pressure", "Threshold"]


@dataclass(frozen=True)
class Pressure:
    memory: bool = False
    disk: bool = False
    pid: bool = False

    @classmethod
    def of(cls, conditions: Iterable[str]) -> Pressure:
        """From condition names (MemoryPressure, DiskPressure, PIDPressure)."""
        names = set(conditions)
        return cls(memory="MemoryPressure" in names, disk="DiskPressure" in names, pid="PIDPressure" in names)
