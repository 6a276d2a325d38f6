"""Go duration strings ("20s", "1m30s", "100ms") as used in KubeletConfiguration."""

from __future__ import annotations

import re

_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def parse_duration(text: str) -> float:
    """Seconds in a Go duration string; ValueError names what is wrong."""
    if not isinstance(text, str) or not text:
        raise ValueError(f"invalid duration {text!r}: want a string like \"20s\" or \"1m30s\"")
    body = text[1:] if text[0] in "+-" else text
    if not body:
        raise ValueError(f"invalid duration {text!r}: want a string like \"20s\" or \"1m30s\"")
    if body == "0":
        return 0.0
    pos, total = 0, 0.0
    while pos < len(body):
        match = _PART.match(body, pos)
        if not match:
            raise ValueError(f"invalid duration {text!r}: want a string like \"20s\" or \"1m30s\"")
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    return -total if text[0] == "-" else total


def format_duration(seconds: float) -> str:
    """The short human form the kubelet prints in back-off messages (e.g. 2m40s, 10s)."""
    whole = int(round(seconds))
    minutes, secs = divmod(whole, 60)
    hours, minutes = divmod(minutes, 60)
    out = ""
    if hours:
        out += f"{hours}h"
    if hours or minutes:
        out += f"{minutes}m"
    return out + f"{secs}s"
