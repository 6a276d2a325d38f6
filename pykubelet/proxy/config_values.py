"""Value parsers of the proxy's settings (file fields and flags): each takes what YAML or a flag
gave and returns the value, or raises ValueError saying what it wanted."""

from __future__ import annotations

import ipaddress
from typing import Any, Callable


def cidrs(value: Any) -> list[str]:
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list):
        raise ValueError(f"must be a list of CIDRs, got {value!r}")
    out = []
    for item in filter(None, (str(i).strip() for i in items)):
        try:
            out.append(str(ipaddress.ip_network(item, strict=False)))
        except ValueError:
            raise ValueError(f"invalid CIDR {item!r}") from None
    return out


def nodeport_addresses(value: Any) -> list[str]:
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list):
        raise ValueError(f"must be a list of CIDRs or \"primary\", got {value!r}")
    items = [str(i).strip() for i in items if str(i).strip()]
    if "primary" in items:
        if len(items) > 1:
            raise ValueError("\"primary\" cannot be combined with CIDRs")
        return ["primary"]
    return cidrs(items)


def address(default_port: int) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        if value in ("", None):
            return ""
        text = str(value)
        host, sep, port = text.rpartition(":")
        if not sep or text.endswith("]") or (text.count(":") > 1 and not text.startswith("[")):
            host, port = text, str(default_port)  # an IP alone: kube-proxy adds the default port
        try:
            ipaddress.ip_address(host.strip("[]"))
            number = int(port)
        except ValueError:
            raise ValueError(f"must be IP:port or IP, got {value!r}") from None
        if not 0 < number < 65536:
            raise ValueError(f"port out of range in {value!r}")
        return f"{host}:{number}"
    return parse


def ip(value: Any) -> str:
    try:
        return str(ipaddress.ip_address(str(value)))
    except ValueError:
        raise ValueError(f"must be an IP address, got {value!r}") from None


def int_in(low: int, high: int) -> Callable[[Any], int]:
    def parse(value: Any) -> int:
        number = int(value) if isinstance(value, str) else value
        if isinstance(number, bool) or not isinstance(number, int) or not low <= number <= high:
            raise ValueError(f"must be an integer from {low} to {high}, got {value!r}")
        return number
    return parse


def positive(value: Any) -> float:
    number = float(value) if isinstance(value, str) else value
    if isinstance(number, bool) or not isinstance(number, (int, float)) or number <= 0:
        raise ValueError(f"must be a positive number, got {value!r}")
    return float(number)


def local_mode(value: Any) -> str:
    if value in ("", None):
        return "ClusterCIDR"
    if value not in ("ClusterCIDR", "NodeCIDR"):
        raise ValueError(f"must be ClusterCIDR or NodeCIDR, got {value!r}")
    return value
