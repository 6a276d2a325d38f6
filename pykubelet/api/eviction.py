"""Hard eviction thresholds (KubeletConfiguration evictionHard): signal -> quantity or percentage."""

from __future__ import annotations

from dataclasses import dataclass

from pykubelet.api.quantity import quantity_bytes as parse_quantity

# The kubelet's defaults on Linux.
DEFAULT_EVICTION_HARD = {
    "memory.available": "100Mi",
    "nodefs.available": "10%",
    "nodefs.inodesFree": "5%",
    "imagefs.available": "15%",
}
SIGNALS = ("memory.available", "nodefs.available", "nodefs.inodesFree", "imagefs.available",
           "imagefs.inodesFree", "pid.available")


@dataclass(frozen=True)
class Threshold:
    signal: str
    quantity: int = 0  # absolute, when not a percentage
    percent: float = 0.0

    def crossed(self, available: int, capacity: int) -> bool:
        limit = capacity * self.percent / 100 if self.percent else self.quantity
        return available < limit


def parse_thresholds(values: dict[str, str]) -> dict[str, Threshold]:
    """evictionHard as in KubeletConfiguration; ValueError names the bad signal or value."""
    out = {}
    for signal, value in values.items():
        if signal not in SIGNALS:
            raise ValueError(f"unknown eviction signal {signal!r}; known: {', '.join(SIGNALS)}")
        text = str(value).strip()
        try:
            if text.endswith("%"):
                out[signal] = Threshold(signal, percent=float(text[:-1]))
            else:
                out[signal] = Threshold(signal, quantity=parse_quantity(text))
        except ValueError:
            raise ValueError(f"{signal}: invalid threshold {value!r}; want a quantity (100Mi) or a percentage (10%)")
    return out
