"""Kubernetes resource quantities ("500m", "1.5", "128Mi", "1G") as plain numbers."""

from __future__ import annotations

import re

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_QUANTITY = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+))(?:[eE]([+-]?\d+))?([A-Za-z]*)$")


def quantity(value: object) -> float:
    """The value of a quantity in base units; ValueError on anything else."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    match = _QUANTITY.match(str(value).strip())
    if not match:
        raise ValueError(f"invalid quantity {value!r}")
    number, exponent, suffix = match.groups()
    if exponent and suffix:
        raise ValueError(f"invalid quantity {value!r}")
    base = float(number) * (10 ** int(exponent) if exponent else 1)
    if suffix in _BINARY:
        return base * _BINARY[suffix]
    if suffix in _DECIMAL:
        return base * _DECIMAL[suffix]
    raise ValueError(f"invalid quantity {value!r}: unknown suffix {suffix!r}")


def cpu_millis(value: object) -> int:
    """CPU in millicores, rounded up as the API does ("0.1" -> 100, "1" -> 1000)."""
    return int(-(-quantity(value) * 1000 // 1))


def quantity_bytes(value: object) -> int:
    return int(-(-quantity(value) // 1))
