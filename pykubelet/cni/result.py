"""CNI ADD results (spec 0.3.0 to 1.1.0): interfaces, IPs, routes, DNS.

Parsed into typed values so callers ask `result.ip_of("eth0")` instead of walking JSON;
`to_dict()` gives the JSON back, to store or to pass as the next plugin's prevResult.
"""

from __future__ import annotations

import copy
import ipaddress
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

from pykubelet.cni.config import SUPPORTED_VERSIONS, version_key

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPInterface = ipaddress.IPv4Interface | ipaddress.IPv6Interface
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class ResultError(ValueError):
    """A plugin printed a result that is not a valid CNI result; `field` is the path in it."""

    def __init__(self, field: str, message: str):
        self.field, self.message = field, message
        super().__init__(f"{field}: {message}" if field else message)


@dataclass(frozen=True)
class Interface:
    name: str
    mac: str = ""
    sandbox: str = ""  # the netns path for interfaces inside the container, "" on the host
    mtu: int | None = None
    socket_path: str = ""
    pci_id: str = ""


@dataclass(frozen=True)
class IPConfig:
    address: IPInterface  # address with prefix, e.g. 10.88.0.5/16
    gateway: IPAddress | None = None
    interface: int | None = None  # index into Result.interfaces


@dataclass(frozen=True)
class Route:
    dst: IPNetwork
    gw: IPAddress | None = None
    mtu: int | None = None
    advmss: int | None = None
    priority: int | None = None
    table: int | None = None
    scope: int | None = None


_ROUTE_EXTRAS = ("mtu", "advmss", "priority", "table", "scope")


@dataclass(frozen=True)
class Result:
    cni_version: str
    interfaces: tuple[Interface, ...] = ()
    ips: tuple[IPConfig, ...] = ()
    routes: tuple[Route, ...] = ()
    dns: dict = field(default_factory=dict, hash=False)
    raw: dict = field(default_factory=dict, hash=False, compare=False)

    def ip_of(self, ifname: str = "eth0", family: int = 4) -> IPConfig | None:
        """The first IP of `family` (4 or 6) on the sandbox interface `ifname`, or None."""
        indexes = [i for i, iface in enumerate(self.interfaces) if iface.name == ifname and iface.sandbox]
        if not indexes:  # a result that does not say which side an interface is on
            indexes = [i for i, iface in enumerate(self.interfaces) if iface.name == ifname]
        for ip in self.ips:
            if ip.interface in indexes and ip.address.version == family:
                return ip
        return None

    def to_dict(self, cni_version: str | None = None) -> dict:
        """The result as CNI JSON, in `cni_version` (default: its own) format.

        Fields we do not model (a newer spec's, a plugin's own) are carried over from `raw`.
        """
        version = cni_version or self.cni_version
        out: dict[str, Any] = {k: copy.deepcopy(v) for k, v in self.raw.items()
                               if k not in ("cniVersion", "interfaces", "ips", "routes", "dns")}
        out["cniVersion"] = version
        if self.interfaces:
            out["interfaces"] = [_interface_dict(i) for i in self.interfaces]
        if self.ips:
            out["ips"] = [_ip_dict(ip, version) for ip in self.ips]
        if self.routes:
            out["routes"] = [_route_dict(r) for r in self.routes]
        out["dns"] = copy.deepcopy(self.dns) if self.dns else {}
        return out


def parse_result(data: dict, version: str) -> Result:
    """A result from a plugin's JSON; `version` is the one requested, used if the result has none."""
    if not isinstance(data, dict):
        raise ResultError("", f"must be a JSON object, not {type(data).__name__}")
    result_version = data.get("cniVersion") or version
    if result_version not in SUPPORTED_VERSIONS:
        raise ResultError("cniVersion", f"unsupported result version {result_version!r} "
                                        f"(supported: {', '.join(SUPPORTED_VERSIONS)})")
    interfaces = tuple(_interface(v, f"interfaces[{i}]") for i, v in enumerate(_list(data, "interfaces")))
    ips = tuple(_ip(v, f"ips[{i}]", len(interfaces)) for i, v in enumerate(_list(data, "ips")))
    routes = tuple(_route(v, f"routes[{i}]") for i, v in enumerate(_list(data, "routes")))
    dns = data.get("dns")
    dns = {} if dns is None else dns
    if not isinstance(dns, dict):
        raise ResultError("dns", "must be an object")
    return Result(cni_version=result_version, interfaces=interfaces, ips=ips, routes=routes,
                  dns=copy.deepcopy(dns), raw=copy.deepcopy(data))


def _list(data: dict, key: str) -> list:
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ResultError(key, "must be a list")
    return value


def _object(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise ResultError(where, "must be an object")
    return value


def _uint(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ResultError(where, f"must be a non-negative integer, not {value!r}")
    return value


def _str(value: Any, where: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ResultError(where, f"must be a string, not {value!r}")
    return value


def _interface(value: Any, where: str) -> Interface:
    value = _object(value, where)
    name = _str(value.get("name"), f"{where}.name")
    if not name:
        raise ResultError(f"{where}.name", "required")
    return Interface(name=name, mac=_str(value.get("mac"), f"{where}.mac"),
                     sandbox=_str(value.get("sandbox"), f"{where}.sandbox"),
                     mtu=_uint(value.get("mtu"), f"{where}.mtu"),
                     socket_path=_str(value.get("socketPath"), f"{where}.socketPath"),
                     pci_id=_str(value.get("pciID"), f"{where}.pciID"))


T = TypeVar("T")


def _parsed(value: Any, where: str, parse: Callable[[str], T], what: str) -> T:
    try:
        return parse(_str(value, where))
    except ValueError:
        raise ResultError(where, f"invalid {what} {value!r}") from None


def _ip(value: Any, where: str, interface_count: int) -> IPConfig:
    value = _object(value, where)
    address = _parsed(value.get("address"), f"{where}.address", ipaddress.ip_interface, "CIDR")
    gateway = None
    if value.get("gateway"):
        gateway = _parsed(value["gateway"], f"{where}.gateway", ipaddress.ip_address, "IP")
    interface = _uint(value.get("interface"), f"{where}.interface")
    if interface is not None and interface >= interface_count:
        raise ResultError(f"{where}.interface", f"index {interface} but only {interface_count} interfaces")
    return IPConfig(address=address, gateway=gateway, interface=interface)


def _route(value: Any, where: str) -> Route:
    value = _object(value, where)
    dst = _parsed(value.get("dst"), f"{where}.dst", lambda text: ipaddress.ip_network(text, strict=False),
                  "CIDR")
    gw = _parsed(value["gw"], f"{where}.gw", ipaddress.ip_address, "IP") if value.get("gw") else None
    extras = {k: _uint(value.get(k), f"{where}.{k}") for k in _ROUTE_EXTRAS}
    return Route(dst=dst, gw=gw, **extras)


def _interface_dict(iface: Interface) -> dict:
    out: dict[str, Any] = {"name": iface.name}
    if iface.mac:
        out["mac"] = iface.mac
    if iface.mtu is not None:
        out["mtu"] = iface.mtu
    if iface.sandbox:
        out["sandbox"] = iface.sandbox
    if iface.socket_path:
        out["socketPath"] = iface.socket_path
    if iface.pci_id:
        out["pciID"] = iface.pci_id
    return out


def _ip_dict(ip: IPConfig, version: str) -> dict:
    out: dict[str, Any] = {}
    if version_key(version) < (1, 0, 0):
        out["version"] = str(ip.address.version)  # dropped in 1.0.0
    if ip.interface is not None:
        out["interface"] = ip.interface
    out["address"] = str(ip.address)
    if ip.gateway is not None:
        out["gateway"] = str(ip.gateway)
    return out


def _route_dict(route: Route) -> dict:
    out: dict[str, Any] = {"dst": str(route.dst)}
    if route.gw is not None:
        out["gw"] = str(route.gw)
    for key in _ROUTE_EXTRAS:
        if getattr(route, key) is not None:
            out[key] = getattr(route, key)
    return out
