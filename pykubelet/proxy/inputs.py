"""Services and EndpointSlices, as the watches hold them, to the ServicePorts the rules are made of.

kube-proxy's view of the API: the watches already leave out Services with the
`service.kubernetes.io/service-proxy-name` label or no cluster IP, and headless EndpointSlices
(the queries below); ExternalName Services are skipped here. An endpoint serves the Service port
of the same name and protocol; one that appears in several slices counts once (the copy that is
not terminating wins). Endpoints are sorted by ip:port, so the rules come out the same each time.

Parsing is cached by resourceVersion: a sync of 5,000 unchanged Services parses nothing. A
malformed object is logged once (naming the object and field) and left out; it never stops a sync.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from dataclasses import dataclass
from typing import Any, Callable

from pykubelet.proxy.model import Endpoint, ServiceName, ServicePort, ServicePortName
from pykubelet.util.log import get_logger

log = get_logger(__name__)

PROXY_NAME_LABEL = "service.kubernetes.io/service-proxy-name"
HEADLESS_LABEL = "service.kubernetes.io/headless"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
# The list/watch filters of kube-proxy's informers.
SERVICES_QUERY = {"labelSelector": f"!{PROXY_NAME_LABEL}", "fieldSelector": "spec.clusterIP!=None"}
SLICES_QUERY = {"labelSelector": f"!{HEADLESS_LABEL}"}
DEFAULT_AFFINITY_SECONDS = 10800  # sessionAffinityConfig.clientIP.timeoutSeconds' API default
EXTERNALLY_REACHABLE_TYPES = ("NodePort", "LoadBalancer")

Objects = dict[str, dict[str, Any]]


class BadObject(ValueError):
    """A field that cannot be used; the message names it."""


@dataclass(frozen=True)
class _SlicePorts:
    service: ServiceName
    ports: tuple[tuple[str, str, int], ...]  # (name, protocol, port number)
    endpoints: tuple[tuple[str, str, bool, bool, bool], ...]  # (ip, nodeName, ready, serving, terminating)


def _ipv4(value: Any, where: str) -> str:
    try:
        return str(ipaddress.IPv4Address(value))
    except (ipaddress.AddressValueError, ValueError, TypeError):
        raise BadObject(f"{where}: not an IPv4 address: {value!r}") from None


def _name_of(obj: dict[str, Any]) -> ServiceName:
    meta = obj.get("metadata") or {}
    return ServiceName(meta.get("namespace", ""), meta.get("name", ""))


def service_ports(service: dict[str, Any]) -> list[ServicePort]:
    """The Service's ports, without endpoints; [] for one kube-proxy does not proxy."""
    spec = service.get("spec") or {}
    if spec.get("type") == "ExternalName":
        return []
    candidates = spec.get("clusterIPs") or [spec.get("clusterIP")]
    ips = [ip for ip in candidates if ip and ip != "None" and ":" not in ip]
    if not ips:
        return []  # no IPv4 cluster IP: nothing for an IPv4 proxy to do
    cluster_ip = _ipv4(ips[0], "spec.clusterIP")
    external_ips = tuple(_ipv4(ip, "spec.externalIPs") for ip in spec.get("externalIPs") or [] if ":" not in ip)
    ingress = ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    lb_ips = tuple(_ipv4(i["ip"], "status.loadBalancer.ingress.ip") for i in ingress
                   if i.get("ip") and ":" not in i["ip"] and i.get("ipMode", "VIP") == "VIP")
    ranges = []
    for text in spec.get("loadBalancerSourceRanges") or []:
        try:
            net = ipaddress.ip_network(str(text).strip(), strict=False)
        except ValueError:
            raise BadObject(f"spec.loadBalancerSourceRanges: not a CIDR: {text!r}") from None
        if net.version == 4:
            ranges.append(str(net))
    if "0.0.0.0/0" in ranges:
        ranges = []  # "anyone" is no filter at all
    affinity = 0
    if spec.get("sessionAffinity") == "ClientIP":
        config = (spec.get("sessionAffinityConfig") or {}).get("clientIP") or {}
        affinity = int(config.get("timeoutSeconds") or DEFAULT_AFFINITY_SECONDS)
    reachable = spec.get("type") in EXTERNALLY_REACHABLE_TYPES or bool(spec.get("externalIPs"))
    external_local = reachable and spec.get("externalTrafficPolicy") == "Local"
    out = []
    for i, port in enumerate(spec.get("ports") or []):
        try:
            number, node_port = int(port["port"]), int(port.get("nodePort") or 0)
        except (KeyError, TypeError, ValueError):
            raise BadObject(f"spec.ports[{i}].port: want a port number, got {port.get('port')!r}") from None
        name = ServicePortName(_name_of(service), str(port.get("name") or ""), str(port.get("protocol") or "TCP"))
        out.append(ServicePort(name, cluster_ip, number, node_port, external_ips, lb_ips, tuple(ranges), affinity,
                               spec.get("internalTrafficPolicy") == "Local", external_local))
    return out


def slice_ports(endpoint_slice: dict[str, Any]) -> _SlicePorts | None:
    """The slice's ports and endpoints; None for one an IPv4 proxy does not use."""
    if endpoint_slice.get("addressType") != "IPv4":
        return None
    meta = endpoint_slice.get("metadata") or {}
    service = (meta.get("labels") or {}).get(SERVICE_NAME_LABEL)
    if not service:
        raise BadObject(f"metadata.labels: no {SERVICE_NAME_LABEL} label")
    ports = tuple((p["name"], p.get("protocol") or "TCP", int(p["port"]))
                  for p in endpoint_slice.get("ports") or []
                  if p.get("name") is not None and p.get("port"))  # kube-proxy ignores these too
    endpoints = []
    for i, ep in enumerate(endpoint_slice.get("endpoints") or []):
        if not ep.get("addresses"):
            continue
        conditions = ep.get("conditions") or {}
        endpoints.append((_ipv4(ep["addresses"][0], f"endpoints[{i}].addresses"), ep.get("nodeName") or "",
                          conditions.get("ready") is not False, conditions.get("serving") is not False,
                          conditions.get("terminating") is True))
    return _SlicePorts(ServiceName(meta.get("namespace", ""), service), ports, tuple(endpoints))


class Inputs:
    """The proxy's view of the API, rebuilt at each sync from the watches' current objects."""

    def __init__(self, node_name: str):
        self.node_name = node_name
        self._services: dict[str, tuple[str, list[ServicePort]]] = {}  # key -> (resourceVersion, ports)
        self._slices: dict[str, tuple[str, _SlicePorts | None]] = {}
        self._joined: dict[ServiceName, tuple[Any, list[ServicePort]]] = {}  # name -> (fingerprint, ports)

    def _parse(self, cache: dict, objects: Objects, parse: Callable[[dict[str, Any]], Any], what: str,
               empty: Any) -> None:
        for key in cache.keys() - objects.keys():
            del cache[key]
        for key, obj in objects.items():
            version = (obj.get("metadata") or {}).get("resourceVersion", "")
            cached = cache.get(key)
            if cached is not None and cached[0] == version:
                continue
            try:
                parsed = parse(obj)
            except (BadObject, KeyError, TypeError, ValueError, AttributeError) as e:
                log.warning(f"Ignoring a malformed {what}", object=str(_name_of(obj)), err=str(e))
                parsed = empty
            cache[key] = (version, parsed)

    def service_ports(self, services: Objects, slices: Objects) -> dict[ServicePortName, ServicePort]:
        """Every proxied Service port with its endpoints, as of these objects."""
        self._parse(self._services, services, service_ports, "Service", [])
        self._parse(self._slices, slices, slice_ports, "EndpointSlice", None)
        slices_of: dict[ServiceName, list[tuple[str, str, _SlicePorts]]] = {}
        for key, (version, parsed) in self._slices.items():
            if parsed is not None:
                slices_of.setdefault(parsed.service, []).append((key, version, parsed))
        joined: dict[ServiceName, tuple[Any, list[ServicePort]]] = {}
        out: dict[ServicePortName, ServicePort] = {}
        for version, ports in self._services.values():
            if not ports:
                continue
            name = ports[0].name.service
            mine = sorted(slices_of.get(name, []), key=lambda s: s[0])
            fingerprint = (version, tuple((key, v) for key, v, _ in mine))
            cached = self._joined.get(name)
            if cached is None or cached[0] != fingerprint:
                cached = (fingerprint, [self._with_endpoints(p, [s for _, _, s in mine]) for p in ports])
            joined[name] = cached
            out.update((p.name, p) for p in cached[1])
        self._joined = joined
        return out

    def _with_endpoints(self, port: ServicePort, slices: list[_SlicePorts]) -> ServicePort:
        by_address: dict[str, Endpoint] = {}
        for s in slices:
            for name, protocol, number in s.ports:
                if name != port.name.port or protocol != port.name.protocol:
                    continue
                for ip, node, ready, serving, terminating in s.endpoints:
                    ep = Endpoint(ip, number, bool(node) and node == self.node_name, ready, serving, terminating)
                    if str(ep) not in by_address or not terminating:
                        by_address[str(ep)] = ep
        endpoints = tuple(by_address[k] for k in sorted(by_address))
        return dataclasses.replace(port, endpoints=endpoints)
