"""/configz: the effective KubeletConfiguration, {"kubeletconfig": {...}}, as the kubelet serves it.

Built from the settings through the options table (config/options.py), so every field the agent
reads is shown under its own name, nested groups (authentication.webhook...) included.
"""

from __future__ import annotations

from typing import Any

from pykubelet.api.eviction import Amount, Threshold
from pykubelet.config import CONFIG_API_VERSION, CONFIG_KIND, Settings, values
from pykubelet.config import node_lifecycle
from pykubelet.config.options import OPTIONS

DURATION_PARSERS = (values.positive_duration, values.non_negative_duration, values.log_monitor_interval)


def go_duration(seconds: float) -> str:
    """Go's Duration.String(): 20s, 1m0s, 2h0m0s, 500ms."""
    if 0 < seconds < 1:
        return f"{seconds * 1000:g}ms"
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    frac = f"{seconds - whole:.9f}".rstrip("0").rstrip(".")[1:] if seconds != whole else ""
    if hours:
        return f"{hours}h{minutes}m{secs}{frac}s"
    if minutes:
        return f"{minutes}m{secs}{frac}s"
    return f"{secs}{frac}s"


def _threshold(t: Threshold) -> str:
    return f"{t.percent:g}%" if t.percent else str(t.quantity)


def _plain(option, value: Any) -> Any:
    if option.parse in DURATION_PARSERS:
        return go_duration(value)
    if option.parse is values.grace_periods:
        return {k: go_duration(v) for k, v in value.items()}
    if option.parse is node_lifecycle.grace_periods_by_priority:
        return [{"priority": row.priority, "shutdownGracePeriodSeconds": row.seconds} for row in value]
    if isinstance(value, dict) and value and all(isinstance(v, Amount) for v in value.values()):
        return {k: f"{v.percent:g}%" if v.percent else str(v.quantity) for k, v in value.items()}
    if isinstance(value, dict) and value and all(isinstance(v, Threshold) for v in value.values()):
        return {k: _threshold(v) for k, v in value.items()}
    return value


def kubelet_config(settings: Settings) -> dict[str, Any]:
    config: dict[str, Any] = {"kind": CONFIG_KIND, "apiVersion": CONFIG_API_VERSION}
    for option in OPTIONS:
        if not option.field or not option.implemented:
            continue
        value: Any = settings
        for attr in option.target.split("."):
            value = getattr(value, attr)
        *groups, leaf = option.field.split(".")
        owner = config
        for group in groups:
            owner = owner.setdefault(group, {})
        owner[leaf] = _plain(option, value)
    return {"kubeletconfig": config}
