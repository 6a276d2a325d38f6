"""The IPVS mode's desired state: pure functions of the Service ports and the node's addresses.

Laid out as kube-proxy's IPVS proxier lays it out, so `ipvsadm -Ln`, `ip addr show kube-ipvs0`
and `ipset list` read the same on a node it runs:

* every cluster IP, and every external or load balancer IP that is not one of the node's own
  addresses, is a host address on the dummy interface `kube-ipvs0` (so the kernel takes the
  packets as local, and IPVS sees them on the way in);
* one virtual server per (address, port, protocol): cluster IP, each external IP, each load
  balancer IP, and each node address x NodePort; its real servers are the Service port's
  endpoints (weight 1, masquerading), the local ones only for a `Local` traffic policy (or all
  of them, when there is no local one, so that local pods keep access);
* ClientIP session affinity is IPVS persistence with the affinity's timeout;
* the ipsets (ipvs_rules.py) hold the addresses and ports the few iptables rules match.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from pykubelet.proxy.iptables_rules import RuleSettings
from pykubelet.proxy.model import ServicePort, ServicePortName
from pykubelet.proxy.selection import select

DUMMY_DEVICE = "kube-ipvs0"
DEFAULT_SCHEDULER = "rr"
FLAG_PERSISTENT, FLAG_HASHED, FLAG_SOURCE_HASH = 0x1, 0x2, 0x10

# The ipsets, by kube-proxy's names.
LOOP_BACK, CLUSTER_IP, EXTERNAL_IP, EXTERNAL_IP_LOCAL = (
    "KUBE-LOOP-BACK", "KUBE-CLUSTER-IP", "KUBE-EXTERNAL-IP", "KUBE-EXTERNAL-IP-LOCAL")
LOAD_BALANCER, LOAD_BALANCER_LOCAL, LOAD_BALANCER_FW = (
    "KUBE-LOAD-BALANCER", "KUBE-LOAD-BALANCER-LOCAL", "KUBE-LOAD-BALANCER-FW")
LOAD_BALANCER_SOURCE_IP, LOAD_BALANCER_SOURCE_CIDR = "KUBE-LOAD-BALANCER-SOURCE-IP", "KUBE-LOAD-BALANCER-SOURCE-CIDR"
NODE_PORT = {"tcp": "KUBE-NODE-PORT-TCP", "udp": "KUBE-NODE-PORT-UDP", "sctp": "KUBE-NODE-PORT-SCTP-HASH"}
NODE_PORT_LOCAL = {"tcp": "KUBE-NODE-PORT-LOCAL-TCP", "udp": "KUBE-NODE-PORT-LOCAL-UDP",
                   "sctp": "KUBE-NODE-PORT-LOCAL-SCTP-HASH"}
HEALTH_CHECK_NODE_PORT, IPVS_IPS = "KUBE-HEALTH-CHECK-NODE-PORT", "KUBE-IPVS-IPS"


@dataclass(frozen=True)
class IpvsSettings(RuleSettings):
    """The iptables part's settings (masquerade bit, cluster CIDR, --random-fully) and IPVS's own."""

    scheduler: str = DEFAULT_SCHEDULER
    exclude_cidrs: tuple[str, ...] = ()
    """ipvs.excludeCIDRs: virtual servers in these are never deleted (someone else's)."""


@dataclass(frozen=True, order=True)
class VirtualServer:
    address: str
    port: int
    protocol: str
    """TCP, UDP or SCTP."""
    scheduler: str = DEFAULT_SCHEDULER
    flags: int = 0
    """FLAG_PERSISTENT, FLAG_SOURCE_HASH; never FLAG_HASHED (the kernel's own)."""
    timeout: int = 0
    """Persistence timeout (seconds)."""

    @property
    def key(self) -> str:
        """What identifies it in the kernel, spelled as kube-proxy does: 10.96.0.1:443/TCP."""
        return f"{self.address}:{self.port}/{self.protocol}"


@dataclass(frozen=True, order=True)
class RealServer:
    address: str
    port: int

    def __str__(self) -> str:
        return f"{self.address}:{self.port}"


@dataclass(frozen=True)
class PortResult:
    """What the proxier's metrics want to know of a Service port."""

    no_local_internal: bool = False
    no_local_external: bool = False


@dataclass
class DesiredState:
    services: dict[str, VirtualServer] = field(default_factory=dict)
    """key -> virtual server."""
    destinations: dict[str, frozenset[RealServer]] = field(default_factory=dict)
    """key of a virtual server -> its real servers (weight 1 each)."""
    bound: set[str] = field(default_factory=set)
    """The addresses kube-ipvs0 holds."""
    members: dict[str, set[str]] = field(default_factory=dict)
    """ipset name -> its entries, in ipset's own spelling (`10.96.0.1,tcp:443`)."""
    no_node_access: list[tuple[str, str, int]] = field(default_factory=list)
    """(LB IP, protocol, port) the node itself must not reach: its sourceRanges leave it out."""
    results: dict[ServicePortName, PortResult] = field(default_factory=dict)

    def add(self, ipset: str, entry: str) -> None:
        self.members.setdefault(ipset, set()).add(entry)


def _net_entry(cidr: str) -> str:
    """ipset prints a host-sized net as a bare address; so do we, or every sync would churn it."""
    net = ipaddress.ip_network(cidr, strict=False)
    return str(net.network_address) if net.prefixlen == net.max_prefixlen else str(net)


def _contains(cidr: str, ip: str) -> bool:
    return bool(ip) and ipaddress.ip_address(ip) in ipaddress.ip_network(cidr, strict=False)


def nodeport_addresses(settings: IpvsSettings, node_addresses: list[str]) -> list[str]:
    """The addresses NodePort virtual servers listen on: the node's (all but loopback and
    kube-ipvs0's), or those nodePortAddresses picked, loopback left out as kube-proxy does."""
    chosen = node_addresses if settings.nodeport_ips is None else settings.nodeport_ips
    return sorted({ip for ip in chosen if not ipaddress.ip_address(ip).is_loopback})


def desired_state(ports: dict[ServicePortName, ServicePort], settings: IpvsSettings,
                  node_addresses: list[str]) -> DesiredState:
    """node_addresses: this node's addresses except loopback and kube-ipvs0's."""
    out = DesiredState()
    own = set(node_addresses)
    nodeport_ips = nodeport_addresses(settings, node_addresses)
    for name in sorted(ports):
        _add_port(out, ports[name], settings, own, nodeport_ips)
    if out.bound:
        out.members[IPVS_IPS] = set(out.bound)
    return out


def _add_port(out: DesiredState, sp: ServicePort, s: IpvsSettings, own: set[str], nodeport_ips: list[str]) -> None:
    proto = sp.protocol
    sel = select(sp)
    flags = (FLAG_PERSISTENT if sp.affinity_seconds else 0) | (FLAG_SOURCE_HASH if s.scheduler == "mh" else 0)

    def virtual_server(address: str, port: int, only_local: bool, bind: bool) -> None:
        vs = VirtualServer(address, port, sp.name.protocol, s.scheduler, flags, sp.affinity_seconds)
        endpoints = (sel.local or sel.cluster) if only_local else sel.cluster
        out.services[vs.key] = vs
        out.destinations[vs.key] = frozenset(RealServer(ep.ip, ep.port) for ep in endpoints)
        if bind:
            out.bound.add(address)

    for ep in sp.endpoints:
        if ep.local:  # a pod reaching itself through the Service: masqueraded (hairpin)
            out.add(LOOP_BACK, f"{ep.ip},{proto}:{ep.port},{ep.ip}")
    out.add(CLUSTER_IP, f"{sp.cluster_ip},{proto}:{sp.port}")
    virtual_server(sp.cluster_ip, sp.port, sp.internal_local, True)
    for ip in sp.external_ips:
        out.add(EXTERNAL_IP_LOCAL if sp.external_local else EXTERNAL_IP, f"{ip},{proto}:{sp.port}")
        virtual_server(ip, sp.port, sp.external_local, ip not in own)
    for ip in sp.load_balancer_ips:
        entry = f"{ip},{proto}:{sp.port}"
        out.add(LOAD_BALANCER, entry)
        if sp.external_local:
            out.add(LOAD_BALANCER_LOCAL, entry)
        if sp.source_ranges:
            out.add(LOAD_BALANCER_FW, entry)
            for cidr in sp.source_ranges:
                out.add(LOAD_BALANCER_SOURCE_CIDR, f"{entry},{_net_entry(cidr)}")
            if any(_contains(cidr, s.node_ip) for cidr in sp.source_ranges):
                # the node reaching an LB IP routed back to itself comes from that very IP
                out.add(LOAD_BALANCER_SOURCE_IP, f"{entry},{ip}")
            else:
                out.no_node_access.append((ip, proto, sp.port))
        virtual_server(ip, sp.port, sp.external_local, ip not in own)
    if sp.node_port and nodeport_ips:
        if proto == "sctp":
            entries = [f"{ip},{proto}:{sp.node_port}" for ip in nodeport_ips]
        else:
            entries = [str(sp.node_port)]
        for entry in entries:
            out.add(NODE_PORT[proto], entry)
            if sp.external_local:
                out.add(NODE_PORT_LOCAL[proto], entry)
        for ip in nodeport_ips:
            virtual_server(ip, sp.node_port, sp.external_local, False)
    has_external_vs = bool(sp.external_ips or sp.load_balancer_ips or (sp.node_port and nodeport_ips))
    only_local_somewhere = sp.internal_local or (sp.external_local and has_external_vs)
    if only_local_somewhere and sel.has_any and not sel.local:
        out.results[sp.name] = PortResult(sp.internal_local, sp.external_local)
    else:
        out.results[sp.name] = PortResult()
