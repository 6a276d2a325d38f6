"""A Service port and an endpoint as the proxy rules see them: plain, immutable values.

A Service with three ports is three `ServicePort`s; an EndpointSlice's endpoint serves the port of
the same name and protocol. Everything the rules of one Service port depend on is in these two
types, so equal inputs give equal rules (the partial syncs rely on it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, TypeVar


@dataclass(frozen=True, order=True)
class ServiceName:
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, order=True)
class ServicePortName:
    """A Service port: the Service, the port's name ("" for a lone unnamed port) and protocol."""

    service: ServiceName
    port: str
    protocol: str
    """TCP, UDP or SCTP, as the API spells it."""

    def __str__(self) -> str:
        """kube-proxy's spelling, used in comments and hashed into chain names: ns/name[:port]."""
        return f"{self.service}:{self.port}" if self.port else str(self.service)


@dataclass(frozen=True)
class Endpoint:
    ip: str
    port: int
    local: bool
    """The endpoint's nodeName is this node."""
    ready: bool
    serving: bool
    terminating: bool

    def __str__(self) -> str:
        return f"{self.ip}:{self.port}"


@dataclass(frozen=True)
class ServicePort:
    name: ServicePortName
    cluster_ip: str
    port: int
    node_port: int = 0
    external_ips: tuple[str, ...] = ()
    load_balancer_ips: tuple[str, ...] = ()
    """status.loadBalancer.ingress IPs (VIP mode)."""
    source_ranges: tuple[str, ...] = ()
    """loadBalancerSourceRanges; empty (or containing 0.0.0.0/0) means any source."""
    affinity_seconds: int = 0
    """sessionAffinity ClientIP's timeout; 0: no affinity."""
    internal_local: bool = False
    """internalTrafficPolicy: Local."""
    external_local: bool = False
    """externalTrafficPolicy: Local, on a Service reachable from outside."""
    endpoints: tuple[Endpoint, ...] = field(default=())
    """Every endpoint of this port, sorted by ip:port (kube-proxy's order), whatever its state."""

    @property
    def protocol(self) -> str:
        """Lower case, as iptables and nft spell it."""
        return self.name.protocol.lower()

    @property
    def externally_accessible(self) -> bool:
        return bool(self.node_port or self.load_balancer_ips or self.external_ips)

    @property
    def uses_cluster_endpoints(self) -> bool:
        return not self.internal_local or self.externally_accessible

    @property
    def uses_local_endpoints(self) -> bool:
        return self.internal_local or (self.external_local and self.externally_accessible)


@dataclass(frozen=True)
class CommonSettings:
    """What the rules of every mode depend on besides the Service ports (each mode's
    RuleSettings adds its own)."""

    masquerade_bit: int = 14
    masquerade_all: bool = False
    cluster_cidrs: tuple[str, ...] = ()
    """Pod traffic is traffic from these; empty: no local-traffic detection (as kube-proxy)."""
    node_ip: str = ""
    nodeport_ips: tuple[str, ...] | None = None
    """The addresses NodePorts answer on; None: every local address (nftables: but loopback)."""


R = TypeVar("R")


def rules_to_write(ports: dict[ServicePortName, ServicePort], changed: set[ServicePortName] | None,
                   previous: dict[ServicePortName, R], build: Callable[[ServicePort], R]
                   ) -> tuple[dict[ServicePortName, R], list[ServicePortName]]:
    """Every port's rules, and the ports whose rules must be written: all of them on a full sync
    (changed=None), else the changed ones and any the last sync did not have."""
    rules: dict[ServicePortName, R] = {}
    written: list[ServicePortName] = []
    for name in sorted(ports):
        if changed is not None and name not in changed and name in previous:
            rules[name] = previous[name]
        else:
            rules[name] = build(ports[name])
            written.append(name)
    return rules, written
