"""Parsers for the shapes of the kubelet's other settings (config/ignored.py): pykubelet does not act
on those, but a value of the wrong type is still an error naming the field or flag, as the kubelet's
decoding makes it. Each takes a YAML value or a flag's string, or raises ValueError."""

from __future__ import annotations

from typing import Any

from pykubelet.config.values import boolean
from pykubelet.util.durations import parse_duration


def integer(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"must be an integer, got {value!r}")
    return value


def number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"must be a number, got {value!r}")
    return float(value)


def duration(value: Any) -> float:
    """Any Go duration, zero and negative included (the kubelet validates most of them itself)."""
    return parse_duration(value)


def string_list(value: Any) -> list[str]:
    """A YAML list of strings, or a comma-separated flag."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise ValueError(f"must be a list of strings, got {value!r}")
    return [i.strip() for i in items if i.strip()]


def int_list(value: Any) -> list[int]:
    items = [int(i) for i in value.split(",") if i.strip()] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in items):
        raise ValueError(f"must be a list of integers, got {value!r}")
    return items


def _pairs(value: Any, what: str) -> dict[str, str]:
    """key=value,key2=value2 (a flag) or a YAML map of scalars."""
    if isinstance(value, dict):
        if not all(isinstance(k, str) and isinstance(v, (str, int, float, bool)) for k, v in value.items()):
            raise ValueError(f"must be a map of {what}, got {value!r}")
        return {k: v if isinstance(v, str) else str(v).lower() if isinstance(v, bool) else str(v)
                for k, v in value.items()}
    if not isinstance(value, str):
        raise ValueError(f"must be a map of {what} (key=value,...), got {value!r}")
    out = {}
    for item in filter(None, (i.strip() for i in value.split(","))):
        key, sep, val = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"invalid entry {item!r}: want key=value")
        out[key.strip()] = val.strip()
    return out


def string_map(value: Any) -> dict[str, str]:
    return _pairs(value, "strings")


def bool_map(value: Any) -> dict[str, bool]:
    """featureGates: {Name: true} or Name=true,Other=false."""
    return {k: boolean(v) if isinstance(v, bool) else _bool_text(k, v) for k, v in _pairs(value, "booleans").items()}


def _bool_text(key: str, text: str) -> bool:
    try:
        return boolean(text)
    except ValueError:
        raise ValueError(f"{key}: must be true or false, got {text!r}") from None


def mapping(value: Any) -> dict[str, Any]:
    """A nested object (logging, memorySwap, crashLoopBackOff...): an object is all that is checked."""
    if not isinstance(value, dict):
        raise ValueError(f"must be an object, got {value!r}")
    return value


def object_list(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not all(isinstance(i, dict) for i in value):
        raise ValueError(f"must be a list of objects, got {value!r}")
    return value


def duration_or_nanoseconds(value: Any) -> float:
    """logging.flushFrequency: a duration string, or an integer of nanoseconds."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value / 1e9
    return parse_duration(value)


def anything(value: Any) -> Any:
    """A value whose shape pykubelet does not look at."""
    return value


def flag_as_object(text: str) -> dict[str, str]:
    """The flag form of a setting that is an object in the config file, kept as given."""
    return {"flag": text}
