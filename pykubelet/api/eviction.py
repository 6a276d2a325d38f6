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
        if text in ("0%", "100%"):
            continue  # the kubelet ignores these: the signal is off
        try:
            if text.endswith("%"):
                threshold = Threshold(signal, percent=float(text[:-1]))
            else:
                threshold = Threshold(signal, quantity=parse_quantity(text))
        except ValueError:
            raise ValueError(f"{signal}: invalid threshold {value!r}; want a quantity (100Mi) or a percentage (10%)")
        if not 0 <= threshold.percent <= 100:
            raise ValueError(f"{signal}: invalid threshold {value!r}; a percentage must be between 0% and 100%")
        if threshold.quantity < 0 or (not text.endswith("%") and threshold.quantity == 0):
            raise ValueError(f"{signal}: invalid threshold {value!r}; must be positive")
        out[signal] = threshold
    return out
