"""The API's time formats, in one place: RFC 3339 in whole seconds (metav1.Time: status times,
events) and with microseconds (metav1.MicroTime: Lease renewals)."""

from __future__ import annotations

import time
from datetime import datetime, timezone


def rfc3339(seconds: float) -> str | None:
    """Seconds since the epoch as metav1.Time; None for 0 (unset)."""
    if not seconds:
        return None
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_rfc3339() -> str:
    return rfc3339(time.time()) or ""


def micro_time() -> str:
    """Now as metav1.MicroTime."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def seconds_from_rfc3339(value: str) -> float:
    """A metav1.Time as seconds since the epoch; 0.0 for "" or a value that is not one."""
    try:
        return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()
    except (TypeError, ValueError):
        return 0.0
