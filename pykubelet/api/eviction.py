"""Eviction thresholds (KubeletConfiguration evictionHard, evictionSoft with
evictionSoftGracePeriod, evictionMinimumReclaim): signal -> quantity or percentage."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

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
_BINARY_SUFFIXES = ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


def share(capacity: int, percent: float) -> int:
    """percent% of capacity, cut to a whole number."""
    return int(capacity * percent / 100)


@dataclass(frozen=True)
class Amount:
    """A quantity, or a percentage of the signal's capacity (evictionMinimumReclaim's values)."""

    quantity: int = 0
    percent: float = 0.0

    def of(self, capacity: int) -> int:
        return share(capacity, self.percent) if self.percent else self.quantity


@dataclass(frozen=True)
class Threshold:
    signal: str
    quantity: int = 0  # absolute, when not a percentage
    percent: float = 0.0
    grace_period: float = 0.0
    """Soft thresholds: how long the signal must stay below it before a pod is evicted; 0: hard."""
    min_reclaim: Amount | None = None
    """evictionMinimumReclaim: once met, the threshold holds until this much more is available."""
    decimal: bool = field(default=False, compare=False)
    """The quantity was written without a binary suffix (500M, 1000): printed back that way."""

    def limit(self, capacity: int) -> int:
        """The threshold in the signal's units for a capacity (a percentage's share of it)."""
        return share(capacity, self.percent) if self.percent else self.quantity

    def crossed(self, available: int, capacity: int) -> bool:
        return available < self.limit(capacity)

    def unresolved(self, available: int, capacity: int) -> bool:
        """Still met counting the minimum reclaim: less available than threshold + reclaim."""
        extra = self.min_reclaim.of(capacity) if self.min_reclaim else 0
        return available < self.limit(capacity) + extra


def _check_signal(signal: str) -> None:
    if signal not in SIGNALS:
        raise ValueError(f"unknown eviction signal {signal!r}; known: {', '.join(SIGNALS)}")


def parse_thresholds(values: dict[str, str]) -> dict[str, Threshold]:
    """evictionHard (or evictionSoft) as in KubeletConfiguration; ValueError names the bad signal or value."""
    out = {}
    for signal, value in values.items():
        _check_signal(signal)
        text = str(value).strip()
        if text in ("0%", "100%"):
            continue  # the kubelet ignores these: the signal is off
        try:
            if text.endswith("%"):
                threshold = Threshold(signal, percent=float(text[:-1]))
            else:
                threshold = Threshold(signal, quantity=parse_quantity(text),
                                      decimal=not text.endswith(_BINARY_SUFFIXES))
        except ValueError:
            raise ValueError(f"{signal}: invalid threshold {value!r}; want a quantity (100Mi) or a percentage (10%)")
        if not 0 <= threshold.percent <= 100:
            raise ValueError(f"{signal}: invalid threshold {value!r}; a percentage must be between 0% and 100%")
        if threshold.quantity < 0 or (not text.endswith("%") and threshold.quantity == 0):
            raise ValueError(f"{signal}: invalid threshold {value!r}; must be positive")
        out[signal] = threshold
    return out


def parse_amounts(values: dict[str, str]) -> dict[str, Amount]:
    """evictionMinimumReclaim: signal -> quantity (>= 0) or percentage (> 0%)."""
    out = {}
    for signal, value in values.items():
        _check_signal(signal)
        text = str(value).strip()
        try:
            amount = Amount(percent=float(text[:-1])) if text.endswith("%") else Amount(quantity=parse_quantity(text))
        except ValueError:
            raise ValueError(f"{signal}: invalid minimum reclaim {value!r}; want a quantity (500Mi) or a percentage "
                             f"(5%)")
        if amount.quantity < 0 or (text.endswith("%") and amount.percent <= 0):
            raise ValueError(f"{signal}: invalid minimum reclaim {value!r}; must be positive")
        out[signal] = amount
    return out


def eviction_thresholds(hard: dict[str, Threshold], soft: dict[str, Threshold], grace_periods: dict[str, float],
                        min_reclaim: dict[str, Amount]) -> list[Threshold]:
    """Every threshold the eviction manager watches, as the kubelet combines its settings: hard
    ones, then soft ones with their grace periods, each with its signal's minimum reclaim.
    ValueError when a soft threshold has no grace period."""
    out = list(hard.values())
    for signal, threshold in soft.items():
        if signal not in grace_periods:
            raise ValueError(f"grace period must be specified for the soft eviction threshold {signal}")
        out.append(dataclasses.replace(threshold, grace_period=grace_periods[signal]))
    return [dataclasses.replace(t, min_reclaim=min_reclaim.get(t.signal)) for t in out]
