"""Value parsers for settings: each takes a YAML value or a flag's string and returns the setting,
or raises ValueError saying what was expected (the caller adds the file and field, or the flag)."""

from __future__ import annotations

import ipaddress
from typing import Any

from pykubelet.api.eviction import Amount, Threshold, parse_amounts, parse_thresholds
from pykubelet.api.quantity import integer_quantity
from pykubelet.api.sysctls import SysctlAllowlist
from pykubelet.config.settings import AUTHORIZATION_MODES, NETWORK_MODES
from pykubelet.util import tls_names
from pykubelet.util.durations import parse_duration
from pykubelet.util.log import get_logger
from pykubelet.util.scalars import boolean, non_negative_duration  # noqa: F401 (shared with the proxy's settings)

log = get_logger(__name__)


def positive_duration(value: Any) -> float:
    seconds = parse_duration(value)
    if seconds <= 0:
        raise ValueError(f"must be a positive duration, got {value!r}")
    return seconds


def _integer_in(value: Any, lowest: int, highest: int | None, wanted: str) -> int:
    """value if it is an integer (not a bool) in [lowest, highest]; else ValueError saying `wanted`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < lowest or \
            (highest is not None and value > highest):
        raise ValueError(f"must be {wanted}, got {value!r}")
    return value


def port(value: Any) -> int:
    return _integer_in(value, 0, 65535, "a port number between 0 and 65535")


def positive_int(value: Any) -> int:
    return _integer_in(value, 1, None, "a positive integer")


def endpoint(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"must be an endpoint like unix:///run/containerd/containerd.sock, got {value!r}")
    if "://" not in value:
        # The kubelet still accepts a bare socket path, with a deprecation warning.
        log.warning("Using a bare path as a CRI endpoint is deprecated; prefix it with unix://", endpoint=value)
        value = "unix://" + value
    if not value.startswith("unix://"):
        raise ValueError(f"only unix:// endpoints are supported, got {value!r}")
    return value


def positive_number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"must be a positive number, got {value!r}")
    return float(value)


def thresholds(value: Any) -> dict[str, Threshold]:
    """evictionHard: a map of signal to threshold, or the flag's signal<threshold,signal2<threshold2."""
    if isinstance(value, str):
        value = dict(_signal_threshold(item) for item in value.split(",") if item.strip())
    if not isinstance(value, dict):
        raise ValueError(f"must be a map of signal to threshold, got {value!r}")
    return parse_thresholds(value)


def _signal_map(value: Any) -> dict[str, str]:
    from pykubelet.config.shapes import string_map  # shapes imports this module

    return string_map(value)


def grace_periods(value: Any) -> dict[str, float]:
    """evictionSoftGracePeriod: signal -> duration (memory.available=1m30s)."""
    out = {}
    for signal, text in _signal_map(value).items():
        seconds = parse_duration(text)
        if seconds < 0:
            raise ValueError(f"invalid eviction grace period specified: {text}, must be a positive value")
        out[signal] = seconds
    return out


def minimum_reclaims(value: Any) -> dict[str, Amount]:
    """evictionMinimumReclaim: signal -> quantity or percentage (imagefs.available=2Gi)."""
    return parse_amounts(_signal_map(value))


def _signal_threshold(item: str) -> tuple[str, str]:
    signal, sep, threshold = item.partition("<")
    if not sep or not signal.strip() or not threshold.strip():
        raise ValueError(f"invalid threshold {item.strip()!r}: want signal<quantity, e.g. memory.available<100Mi")
    return signal.strip(), threshold.strip()


def labels(value: Any) -> dict[str, str]:
    """key=value,key2=value2 (flag) or a map (not a config field, but the same rules)."""
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()}
    out = {}
    for item in filter(None, str(value).split(",")):
        key, sep, val = item.partition("=")
        if not sep or not key:
            raise ValueError(f"invalid label {item!r}: want key=value")
        out[key.strip()] = val.strip()
    return out


def ip_list(value: Any) -> list[str]:
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(i, str) and i.strip() for i in items):
        raise ValueError(f"must be a list of IP addresses, got {value!r}")
    return [i.strip() for i in items]


def network_mode(value: Any) -> str:
    if value not in NETWORK_MODES:
        raise ValueError(f"must be one of {', '.join(NETWORK_MODES)}, got {value!r}")
    return value


def cidr(value: Any) -> str:
    if not isinstance(value, str):  # ip_network would take an int (or a bool) as an address
        raise ValueError(f"must be a CIDR like 10.244.0.0/24, got {value!r}")
    try:
        return str(ipaddress.ip_network(value, strict=True))
    except (TypeError, ValueError) as e:
        raise ValueError(f"must be a CIDR like 10.244.0.0/24, got {value!r} ({e})") from None


def path_list(value: Any) -> list[str]:
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(isinstance(i, str) and i.strip() for i in items):
        raise ValueError(f"must be a comma-separated list of directories, got {value!r}")
    return [i.strip() for i in items]


def interface_name(value: Any) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= 15 or "/" in value or " " in value:
        raise ValueError(f"must be an interface name of 1 to 15 characters, got {value!r}")
    return value


def sysctl_patterns(value: Any) -> list[str]:
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(i, str) and i.strip() for i in items):
        raise ValueError(f"must be a list of sysctl names or patterns, got {value!r}")
    patterns = [i.strip() for i in items]
    SysctlAllowlist.build(patterns, kernel=())  # ValueError for one that is not namespaced
    return patterns


def text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"must be a string, got {value!r}")
    return value


def non_negative_int(value: Any) -> int:
    return _integer_in(value, 0, None, "a non-negative integer")


def percent(value: Any) -> int:
    return _integer_in(value, 0, 100, "between 0 and 100, inclusive")


def tls_version(value: Any) -> str:
    if not isinstance(value, str) or value not in tls_names.VERSIONS:
        raise ValueError(f"must be one of {', '.join(tls_names.VERSIONS)}, got {value!r}")
    return value


def cipher_suites(value: Any) -> list[str]:
    """A YAML list of IANA suite names, or a comma-separated flag."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(i, str) and i.strip() for i in items):
        raise ValueError(f"must be a list of cipher suite names, got {value!r}")
    unknown = [i.strip() for i in items if i.strip() not in tls_names.CIPHER_SUITES]
    if unknown:
        raise ValueError(f"unknown or unsupported cipher suite(s) {', '.join(unknown)}; "
                         f"known: {', '.join(tls_names.CIPHER_SUITES)}")
    return [i.strip() for i in items]


def authorization_mode(value: Any) -> str:
    if not isinstance(value, str) or value not in AUTHORIZATION_MODES:
        raise ValueError(f"must be one of {', '.join(AUTHORIZATION_MODES)}, got {value!r}")
    return value


TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def _taint(key: Any, value: Any, effect: Any) -> dict[str, str]:
    if not isinstance(key, str) or not key or any(c in key for c in " ,:="):
        raise ValueError(f"invalid taint key {key!r}")
    if effect not in TAINT_EFFECTS:
        raise ValueError(f"taint {key!r}: effect must be one of {', '.join(TAINT_EFFECTS)}, got {effect!r}")
    if value is not None and not isinstance(value, str):
        raise ValueError(f"taint {key!r}: value must be a string, got {value!r}")
    return {"key": key, **({"value": value} if value else {}), "effect": effect}


def taints(value: Any) -> list[dict[str, str]]:
    """registerWithTaints: a YAML list of {key, value, effect}, or the flag's key=value:Effect,key2:Effect."""
    if isinstance(value, str):
        out = []
        for item in filter(None, (i.strip() for i in value.split(","))):
            spec, sep, effect = item.rpartition(":")
            if not sep:
                raise ValueError(f"invalid taint {item!r}: want key=value:Effect or key:Effect")
            key, _, val = spec.partition("=")
            out.append(_taint(key, val, effect))
        return out
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        raise ValueError(f"must be a list of taints ({{key, value, effect}}), got {value!r}")
    return [_taint(t.get("key"), t.get("value"), t.get("effect")) for t in value]


CGROUP_DRIVERS = ("cgroupfs", "systemd")


def cgroup_driver(value: Any) -> str:
    if value not in CGROUP_DRIVERS:
        raise ValueError(f"must be one of {', '.join(CGROUP_DRIVERS)}, got {value!r}")
    return value


def log_max_size(value: Any) -> str:
    """containerLogMaxSize: a quantity of whole bytes, kept as written (the kubelet shows it so)."""
    if not isinstance(value, str):
        raise ValueError(f"must be a quantity such as 10Mi, got {value!r}")
    integer_quantity(value)  # ValueError says why not
    return value


def log_max_files(value: Any) -> int:
    return _integer_in(value, 2, None, "greater than 1")


def log_monitor_interval(value: Any) -> float:
    seconds = parse_duration(value)
    if seconds < 3:
        raise ValueError(f"must be a positive time duration greater than or equal to 3s, got {value!r}")
    return seconds


def is_zero(value: Any) -> bool:
    """The zero value of a Go field: the kubelet's defaulting replaces it with the default."""
    if isinstance(value, bool):
        return False
    if value == 0 or value == "" or value == {} or value == []:
        return True
    if isinstance(value, str):
        try:
            return parse_duration(value) == 0
        except ValueError:
            return False
    return False
