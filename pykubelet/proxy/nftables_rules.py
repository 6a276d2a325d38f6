"""The nftables mode's rules, as `nft -f` text: pure functions of the Service ports.

One table of our own, `ip kube-proxy`, laid out as kube-proxy's nftables proxier lays it out:

* base chains `nat-prerouting`/`nat-output` (dstnat) jump to `services`, which looks the packet's
  (daddr . protocol . dport) up in the verdict map `service-ips` (cluster, external and load
  balancer IPs) and, for the node's own addresses, (protocol . dport) in `service-nodeports`;
* each Service port's chain (`service-HASH-ns/name/tcp/port`) DNATs with `numgen random mod N`
  to one endpoint, or, with ClientIP affinity, keeps going to the endpoint the client's address
  is remembered for (a timed set per endpoint);
* `nat-postrouting` -> `masquerading` masquerades what carries the mark, and hairpin connections;
* `filter-*` chains reject (no endpoints: `no-endpoint-services`/`no-endpoint-nodeports`), drop
  (Local policy with no local endpoint), and reject unknown ports of cluster IPs.

A port's share is its map/set elements and its own chains (`PortRules`); `fixed_table` is the rest.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from pykubelet.proxy import names
from pykubelet.proxy.model import CommonSettings, Endpoint, ServicePort
from pykubelet.proxy.selection import select

TABLE = "ip kube-proxy"
REJECT_CHAIN = "reject-chain"
SERVICES, MASQUERADING = "services", "masquerading"
SERVICE_CHECK, NODEPORT_CHECK, CLUSTER_IPS_CHECK, FIREWALL_CHECK = (
    "service-endpoints-check", "nodeport-endpoints-check", "cluster-ips-check", "firewall-check")
# (name, type, hook, priority) of the base chains. Priorities in numbers: dstnat is -100, srcnat
# 100, filter 0 (nft 1.0.6 refuses the names on the output hook, where newer nft accepts them).
BASE_CHAINS = (
    ("filter-prerouting-pre-dnat", "filter", "prerouting", -110),
    ("filter-output-pre-dnat", "filter", "output", -110),
    ("filter-input", "filter", "input", 0),
    ("filter-forward", "filter", "forward", 0),
    ("filter-output", "filter", "output", 0),
    ("nat-prerouting", "nat", "prerouting", -100),
    ("nat-output", "nat", "output", -100),
    ("nat-postrouting", "nat", "postrouting", 100),
)
# (target, from base chain, match)
JUMPS = (
    (NODEPORT_CHECK, "filter-input", "ct state new"),
    (SERVICE_CHECK, "filter-input", "ct state new"),
    (SERVICE_CHECK, "filter-forward", "ct state new"),
    (SERVICE_CHECK, "filter-output", "ct state new"),
    (FIREWALL_CHECK, "filter-prerouting-pre-dnat", "ct state new"),
    (FIREWALL_CHECK, "filter-output-pre-dnat", "ct state new"),
    (SERVICES, "nat-output", ""),
    (SERVICES, "nat-prerouting", ""),
    (MASQUERADING, "nat-postrouting", ""),
    (CLUSTER_IPS_CHECK, "filter-forward", "ct state new"),
    (CLUSTER_IPS_CHECK, "filter-output", "ct state new"),
)
# Every map and set a sync fills in: name -> (declaration, comment)
CONTAINERS = {
    "cluster-ips": ("set", "type ipv4_addr", "Active ClusterIPs"),
    "service-ips": ("map", "type ipv4_addr . inet_proto . inet_service : verdict",
                    "ClusterIP, ExternalIP and LoadBalancer IP traffic"),
    "service-nodeports": ("map", "type inet_proto . inet_service : verdict", "NodePort traffic"),
    "no-endpoint-services": ("map", "type ipv4_addr . inet_proto . inet_service : verdict",
                             "vmap to drop or reject packets to services with no endpoints"),
    "no-endpoint-nodeports": ("map", "type inet_proto . inet_service : verdict",
                              "vmap to drop or reject packets to service nodeports with no endpoints"),
    "firewall-ips": ("map", "type ipv4_addr . inet_proto . inet_service : verdict",
                     "destinations that are subject to LoadBalancerSourceRanges"),
    "hairpin-connections": ("set", "type ipv4_addr . ipv4_addr . inet_proto . inet_service",
                            "service hairpin connections"),
}
NODEPORT_IPS = "nodeport-ips"

Elements = dict[str, dict[str, str]]  # container -> key -> value ("" in a set)


@dataclass(frozen=True)
class RuleSettings(CommonSettings):
    @property
    def masquerade(self) -> str:
        return f"mark set mark or {1 << self.masquerade_bit:#08x}"


@dataclass
class PortRules:
    elements: list[tuple[str, str, str]] = field(default_factory=list)
    """(container, key, value) this port needs."""
    chains: dict[str, list[str]] = field(default_factory=dict)
    affinity_sets: dict[str, int] = field(default_factory=dict)
    """name -> timeout in seconds."""
    no_local_internal: bool = False
    no_local_external: bool = False


def port_rules(sp: ServicePort, s: RuleSettings) -> PortRules:
    out = PortRules()
    sel = select(sp)
    proto, key = sp.protocol, f"{sp.cluster_ip} . {sp.protocol} . {sp.port}"
    svc_chain, local_chain = names.nft_chain("service-", sp.name), names.nft_chain("local-", sp.name)
    ext_chain, fw_chain = names.nft_chain("external-", sp.name), names.nft_chain("firewall-", sp.name)
    affinity = sp.affinity_seconds > 0
    for ep in sel.reachable:
        if affinity:
            out.chains[_endpoint_chain(sp, ep)] = [
                f"update @{_affinity_set(sp, ep)} {{ ip saddr }}", f"meta l4proto {proto} dnat to {ep}"]
            out.affinity_sets[_affinity_set(sp, ep)] = sp.affinity_seconds
        if ep.local:
            out.elements.append(("hairpin-connections", f"{ep.ip} . {ep.ip} . {proto} . {ep.port}", ""))
    uses_cluster = bool(sel.cluster) and sp.uses_cluster_endpoints
    uses_local = bool(sel.local) and sp.uses_local_endpoints
    internal_chain, has_internal = (local_chain, bool(sel.local)) if sp.internal_local else (svc_chain, sel.has_any)
    external_chain, has_external = (local_chain, bool(sel.local)) if sp.external_local else (svc_chain, sel.has_any)
    if not sel.has_any:
        internal_verdict = external_verdict = f"goto {REJECT_CHAIN}"
    else:
        internal_verdict = external_verdict = "drop"
        out.no_local_internal, out.no_local_external = not has_internal, not has_external
    comment = f' comment "{sp.name}"'
    add = out.elements.append
    add(("cluster-ips", sp.cluster_ip, ""))
    if has_internal:
        add(("service-ips", key, f"goto {internal_chain}"))
    else:
        add(("no-endpoint-services", key + comment, internal_verdict))
    for ip in sp.external_ips:
        if sel.has_any:
            add(("service-ips", f"{ip} . {proto} . {sp.port}", f"goto {ext_chain}"))
        if not has_external:
            add(("no-endpoint-services", f"{ip} . {proto} . {sp.port}" + comment, external_verdict))
    uses_fw = bool(sp.load_balancer_ips) and bool(sp.source_ranges)
    for ip in sp.load_balancer_ips:
        if sel.has_any:
            add(("service-ips", f"{ip} . {proto} . {sp.port}", f"goto {ext_chain}"))
        if uses_fw:
            add(("firewall-ips", f"{ip} . {proto} . {sp.port}", f"goto {fw_chain}"))
        if not has_external:
            add(("no-endpoint-services", f"{ip} . {proto} . {sp.port}" + comment, external_verdict))
    if sp.node_port:
        if sel.has_any:
            add(("service-nodeports", f"{proto} . {sp.node_port}", f"goto {ext_chain}"))
        if not has_external:
            add(("no-endpoint-nodeports", f"{proto} . {sp.node_port}" + comment, external_verdict))

    if sel.has_any and sp.externally_accessible:
        ext = out.chains.setdefault(ext_chain, [])
        if not sp.external_local:
            ext.append(f'{s.masquerade} comment "masquerade"')
        else:
            if s.cluster_cidrs:
                ext.append(f'ip saddr {s.cluster_cidrs[0]} goto {svc_chain} comment "short-circuit pod traffic"')
            ext.append(f'fib saddr type local {s.masquerade} comment "masquerade local traffic"')
            ext.append(f'fib saddr type local goto {svc_chain} comment "short-circuit local traffic"')
        if has_external:
            ext.append(f"goto {external_chain}")
    if uses_fw:
        sources = list(sp.source_ranges)
        if s.node_ip and any(ipaddress.ip_address(s.node_ip) in ipaddress.ip_network(c) for c in sp.source_ranges):
            sources += list(sp.load_balancer_ips)
        out.chains[fw_chain] = [f"ip saddr != {{ {', '.join(sources)} }} drop"]
    for chain, used, endpoints in ((svc_chain, uses_cluster, sel.cluster), (local_chain, uses_local, sel.local)):
        if used:
            out.chains[chain] = (_jumps(sp, endpoints) if affinity else
                                 [f"meta l4proto {proto} dnat ip addr . port to numgen random mod {len(endpoints)} "
                                  "map { " + ", ".join(f"{i} : {ep.ip} . {ep.port}" for i, ep in enumerate(endpoints))
                                  + " }"])
    return out


def _endpoint_chain(sp: ServicePort, ep: Endpoint) -> str:
    return "endpoint-" + names.nft_endpoint_base(sp.name, ep)


def _affinity_set(sp: ServicePort, ep: Endpoint) -> str:
    return "affinity-" + names.nft_endpoint_base(sp.name, ep)


def _jumps(sp: ServicePort, endpoints: tuple[Endpoint, ...]) -> list[str]:
    rules = [f"ip saddr @{_affinity_set(sp, ep)} goto {_endpoint_chain(sp, ep)}" for ep in endpoints]
    choices = ", ".join(f"{i} : goto {_endpoint_chain(sp, ep)}" for i, ep in enumerate(endpoints))
    return rules + [f"numgen random mod {len(endpoints)} vmap {{ {choices} }}"]


def chain_head(name: str) -> list[str]:
    """Create the chain, or empty it if it exists."""
    return [f"add chain {TABLE} {name}", f"flush chain {TABLE} {name}"]


def fixed_table(s: RuleSettings, first: bool) -> list[str]:
    """Everything that is not a Service port's: the table, base chains, fixed chains, the maps
    and sets (declared; their elements are the ports'). `first`: re-create the base chains, so a
    change of their type or priority since the last run applies."""
    lines = [f'add table {TABLE} {{ comment "rules for kube-proxy" ; }}']
    if first:
        for name, *_ in BASE_CHAINS:
            lines += [f"add chain {TABLE} {name}", f"delete chain {TABLE} {name}"]
    for name, kind, hook, priority in BASE_CHAINS:
        lines += [f"add chain {TABLE} {name} {{ type {kind} hook {hook} priority {priority} ; }}",
                  f"flush chain {TABLE} {name}"]
    for chain in dict.fromkeys([j[0] for j in JUMPS] + [REJECT_CHAIN]):
        lines += [f"add chain {TABLE} {chain}", f"flush chain {TABLE} {chain}"]
    lines += [f"add rule {TABLE} {source} {match} jump {target}".replace("  ", " ") for target, source, match in JUMPS]
    for name, (kind, decl, comment) in CONTAINERS.items():
        lines.append(f'add {kind} {TABLE} {name} {{ {decl} ; comment "{comment}" ; }}')
    mark = f"{1 << s.masquerade_bit:#08x}"
    lines += [f"add rule {TABLE} {MASQUERADING} mark and {mark} != 0 mark set mark xor {mark} masquerade fully-random",
              f"add rule {TABLE} {MASQUERADING} ct status dnat ip saddr . ip daddr . meta l4proto . th dport "
              "@hairpin-connections masquerade fully-random",
              f'add rule {TABLE} {CLUSTER_IPS_CHECK} ip daddr @cluster-ips reject comment '
              '"Reject traffic to invalid ports of ClusterIPs"',
              f"add rule {TABLE} {REJECT_CHAIN} reject",
              f"add rule {TABLE} {SERVICE_CHECK} ip daddr . meta l4proto . th dport vmap @no-endpoint-services",
              f"add rule {TABLE} {FIREWALL_CHECK} ip daddr . meta l4proto . th dport vmap @firewall-ips"]
    lines.append(f'add set {TABLE} {NODEPORT_IPS} {{ type ipv4_addr ; comment "IPs that accept NodePort traffic" ; }}')
    if s.nodeport_ips is None:
        lines.append(f"delete set {TABLE} {NODEPORT_IPS}")
        to_nodeports = "fib daddr type local ip daddr != 127.0.0.0/8"
    else:
        lines.append(f"flush set {TABLE} {NODEPORT_IPS}")
        ips = [ip for ip in s.nodeport_ips if not ip.startswith("127.")]
        if ips:
            lines.append(f"add element {TABLE} {NODEPORT_IPS} {{ {', '.join(ips)} }}")
        to_nodeports = f"ip daddr @{NODEPORT_IPS}"
    lines.append(f"add rule {TABLE} {NODEPORT_CHECK} {to_nodeports} meta l4proto . th dport vmap @no-endpoint-nodeports")
    if s.masquerade_all:
        lines.append(f'add rule {TABLE} {SERVICES} ip daddr @cluster-ips {s.masquerade} '
                     'comment "masquerade all clusterIP traffic"')
    elif s.cluster_cidrs:
        lines.append(f"add rule {TABLE} {SERVICES} ip daddr @cluster-ips ip saddr != {s.cluster_cidrs[0]} "
                     f'{s.masquerade} comment "masquerade clusterIP traffic from outside cluster"')
    lines += [f"add rule {TABLE} {SERVICES} ip daddr . meta l4proto . th dport vmap @service-ips",
              f"add rule {TABLE} {SERVICES} {to_nodeports} meta l4proto . th dport vmap @service-nodeports"]
    return lines


def element_text(container: str, key: str, value: str, verb: str = "add") -> str:
    if verb == "delete":
        key = key.split(" comment ", 1)[0]
        return f"delete element {TABLE} {container} {{ {key} }}"
    return f"add element {TABLE} {container} {{ {key}{' : ' + value if value else ''} }}"


def affinity_set_text(name: str, seconds: int) -> str:
    return f"add set {TABLE} {name} {{ type ipv4_addr ; flags dynamic,timeout ; timeout {seconds}s ; }}"
