"""Scalar setting values shared by the agent's settings and the proxy's: each takes a YAML value or
a flag's string and returns the value, or raises ValueError saying what was expected."""

from __future__ import annotations

from typing import Any

from pykubelet.util.durations import parse_duration


def boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ValueError(f"must be true or false, got {value!r}")


def non_negative_duration(value: Any) -> float:
    seconds = parse_duration(value)
    if seconds < 0:
        raise ValueError(f"must not be a negative duration, got {value!r}")
    return seconds
