"""Kubernetes resource quantities ("500m", "1.5", "128Mi", "1G") as plain numbers."""

from __future__ import annotations

import math
import re
from fractions import Fraction

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}  # powers of ten
_QUANTITY = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+))(?:[eE]([+-]?\d+))?([A-Za-z]*)$", re.ASCII)


def _exact(value: object) -> Fraction:
    """The exact value of a quantity in base units; ValueError on anything else."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return Fraction(str(value)) if isinstance(value, float) else Fraction(value)
    match = _QUANTITY.match(str(value).strip())
    if not match:
        raise ValueError(f"invalid quantity {value!r}")
    number, exponent, suffix = match.groups()
    if exponent and suffix:
        raise ValueError(f"invalid quantity {value!r}")
    base = Fraction(number) * Fraction(10) ** int(exponent or 0)
    if suffix in _BINARY:
        return base * _BINARY[suffix]
    if suffix in _DECIMAL:
        return base * Fraction(10) ** _DECIMAL[suffix]
    raise ValueError(f"invalid quantity {value!r}: unknown suffix {suffix!r}")


def quantity(value: object) -> float:
    """The value of a quantity in base units; ValueError on anything else."""
    return float(_exact(value))


def cpu_millis(value: object) -> int:
    """CPU in millicores, rounded up as the API does ("0.1" -> 100, "1" -> 1000)."""
    return math.ceil(_exact(value) * 1000)


def quantity_bytes(value: object) -> int:
    return math.ceil(_exact(value))


def integer_quantity(value: object) -> int:
    """A quantity that is a whole number of base units ("10Mi", "1.5Ki", "-1"), as Go's
    Quantity.AsInt64 accepts it; ValueError for a fraction ("100m") or one beyond 64 bits."""
    exact = _exact(value)
    if exact.denominator != 1 or not -2**63 <= exact.numerator < 2**63:
        raise ValueError(f"invalid quantity {value!r}: not a whole number of bytes")
    return exact.numerator


def format_quantity(value: int, binary: bool = True) -> str:
    """A whole number as Go's Quantity prints it: with the largest suffix that leaves a whole
    number ("100Mi", "2k"), bare when none does; binary (Ki, Mi...) or decimal (k, M...)
    suffixes, and below 1024 always bare."""
    base, suffixes = (1024, ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")) if binary else \
        (1000, ("", "k", "M", "G", "T", "P", "E"))
    if binary and -1024 < value < 1024:
        return str(value)
    mantissa, power = value, 0
    while mantissa and mantissa % base == 0 and power < len(suffixes) - 1:
        mantissa, power = mantissa // base, power + 1
    return f"{mantissa}{suffixes[power]}"
