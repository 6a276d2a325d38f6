"""The iptables mode's rules, as iptables-restore text: pure functions of the Service ports.

The layout is kube-proxy's (its iptables proxier), so the packet's path is the same:

nat   PREROUTING, OUTPUT -> KUBE-SERVICES: one rule per service IP and port -> KUBE-SVC-* (Cluster
      policy) or KUBE-SVL-* (Local); external IPs and NodePorts (KUBE-NODEPORTS) -> KUBE-EXT-*;
      the chain picks an endpoint at random (endpoint i of n with probability 1/(n-i), the last
      one always) and jumps to its KUBE-SEP-*, which DNATs to ip:port. Traffic that must be
      masqueraded (from outside the cluster CIDR, hairpin, NodePort) is marked by KUBE-MARK-MASQ,
      and KUBE-POSTROUTING (from POSTROUTING) masquerades what carries the mark.
filter A Service with no endpoints is REJECTed at once (KUBE-SERVICES / KUBE-EXTERNAL-SERVICES);
      KUBE-FORWARD accepts marked and established traffic and drops conntrack-INVALID packets.

`port_rules` renders one Service port; `restore_text` puts the ports together with the fixed
chains. A sync may leave out the per-port chains of ports that did not change (the --noflush
restore keeps them) but always rewrites the top-level chains in full.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pykubelet.proxy import names
from pykubelet.proxy.model import CommonSettings, ServicePort
from pykubelet.proxy.selection import select

MARK_MASQ, POSTROUTING, SERVICES, NODEPORTS = "KUBE-MARK-MASQ", "KUBE-POSTROUTING", "KUBE-SERVICES", "KUBE-NODEPORTS"
EXTERNAL_SERVICES, FORWARD, PROXY_FIREWALL = "KUBE-EXTERNAL-SERVICES", "KUBE-FORWARD", "KUBE-PROXY-FIREWALL"
KUBELET_FIREWALL, CANARY = "KUBE-FIREWALL", "KUBE-PROXY-CANARY"
NAT_CHAINS = (SERVICES, NODEPORTS, POSTROUTING, MARK_MASQ)
FILTER_CHAINS = (SERVICES, EXTERNAL_SERVICES, FORWARD, NODEPORTS, PROXY_FIREWALL)
LARGE_CLUSTER_ENDPOINTS = 1000  # above this many endpoints, per-endpoint comments are left out (kube-proxy's)
NEW = "-m conntrack --ctstate NEW"


@dataclass(frozen=True)
class Jump:
    table: str
    source: str
    target: str
    comment: str
    match: str = ""

    def rule(self) -> str:
        comment = f'-m comment --comment "{self.comment}" ' if self.comment else ""
        return " ".join(filter(None, [self.match, f"{comment}-j {self.target}"]))


# The jumps from the built-in chains, in kube-proxy's order (each is inserted at the top).
JUMPS = (
    Jump("filter", "INPUT", EXTERNAL_SERVICES, "kubernetes externally-visible service portals", NEW),
    Jump("filter", "FORWARD", EXTERNAL_SERVICES, "kubernetes externally-visible service portals", NEW),
    Jump("filter", "INPUT", NODEPORTS, "kubernetes health check service ports"),
    Jump("filter", "FORWARD", SERVICES, "kubernetes service portals", NEW),
    Jump("filter", "OUTPUT", SERVICES, "kubernetes service portals", NEW),
    Jump("filter", "FORWARD", FORWARD, "kubernetes forwarding rules"),
    Jump("filter", "INPUT", PROXY_FIREWALL, "kubernetes load balancer firewall", NEW),
    Jump("filter", "OUTPUT", PROXY_FIREWALL, "kubernetes load balancer firewall", NEW),
    Jump("filter", "FORWARD", PROXY_FIREWALL, "kubernetes load balancer firewall", NEW),
    Jump("nat", "OUTPUT", SERVICES, "kubernetes service portals"),
    Jump("nat", "PREROUTING", SERVICES, "kubernetes service portals"),
    Jump("nat", "POSTROUTING", POSTROUTING, "kubernetes postrouting rules"),
)
# The localhost-NodePort guard (the kubelet's chain, which kube-proxy also makes).
KUBELET_JUMPS = (Jump("filter", "INPUT", KUBELET_FIREWALL, ""), Jump("filter", "OUTPUT", KUBELET_FIREWALL, ""))


@dataclass(frozen=True)
class RuleSettings(CommonSettings):
    localhost_nodeports: bool = True
    random_fully: bool = True
    conntrack_liberal: bool = False

    @property
    def mark(self) -> str:
        return f"{1 << self.masquerade_bit:#08x}"  # Go's %#08x, as kube-proxy prints it

    def if_local(self) -> str:
        return " ".join(f"-s {c}" for c in self.cluster_cidrs[:1])

    def if_not_local(self) -> str:
        return " ".join(f"! -s {c}" for c in self.cluster_cidrs[:1])


@dataclass
class PortRules:
    """What one Service port contributes: rules in the top-level chains, and its own chains."""

    nat_top: list[str] = field(default_factory=list)
    """-A KUBE-SERVICES / -A KUBE-NODEPORTS lines (nat)."""
    filter_top: list[str] = field(default_factory=list)
    chains: dict[str, list[str]] = field(default_factory=dict)
    """Its own nat chains (SVC, SVL, EXT, FW, SEP) -> their -A lines."""
    no_local_internal: bool = False
    no_local_external: bool = False


def port_rules(sp: ServicePort, s: RuleSettings, large: bool = False) -> PortRules:
    out = PortRules()
    sel = select(sp)
    proto, name = sp.protocol, str(sp.name)
    match = f"-m {proto} -p {proto}"
    svc_chain, local_chain = names.iptables_chain("KUBE-SVC-", sp.name), names.iptables_chain("KUBE-SVL-", sp.name)
    ext_chain, fw_chain = names.iptables_chain("KUBE-EXT-", sp.name), names.iptables_chain("KUBE-FW-", sp.name)
    uses_cluster = bool(sel.cluster) and sp.uses_cluster_endpoints
    uses_local = bool(sel.local) and sp.uses_local_endpoints
    internal_chain, has_internal = (local_chain, bool(sel.local)) if sp.internal_local else (svc_chain, sel.has_any)
    external_chain, has_external = (local_chain, bool(sel.local)) if sp.external_local else (svc_chain, sel.has_any)
    has_internal, has_external = has_internal and sel.has_any, has_external and sel.has_any
    uses_ext = sel.has_any and sp.externally_accessible
    uses_fw = sel.has_any and bool(sp.load_balancer_ips) and bool(sp.source_ranges)
    lb_target = fw_chain if uses_fw else ext_chain
    if not sel.has_any:
        internal_verdict = external_verdict = ("REJECT", f'"{name} has no endpoints"')
    else:
        internal_verdict = external_verdict = ("DROP", f'"{name} has no local endpoints"')
        out.no_local_internal, out.no_local_external = not has_internal, not has_external
    dport = f"--dport {sp.port}"
    nat, filt = out.nat_top, out.filter_top

    if has_internal:
        nat.append(f'-A {SERVICES} -m comment --comment "{name} cluster IP" {match} -d {sp.cluster_ip} {dport} '
                   f"-j {internal_chain}")
    else:
        filt.append(f"-A {SERVICES} -m comment --comment {internal_verdict[1]} {match} -d {sp.cluster_ip} {dport} "
                    f"-j {internal_verdict[0]}")
    for ip in sp.external_ips:
        if sel.has_any:
            nat.append(f'-A {SERVICES} -m comment --comment "{name} external IP" {match} -d {ip} {dport} '
                       f"-j {ext_chain}")
        if not has_external:
            filt.append(f"-A {EXTERNAL_SERVICES} -m comment --comment {external_verdict[1]} {match} -d {ip} {dport} "
                        f"-j {external_verdict[0]}")
    for ip in sp.load_balancer_ips:
        if sel.has_any:
            nat.append(f'-A {SERVICES} -m comment --comment "{name} loadbalancer IP" {match} -d {ip} {dport} '
                       f"-j {lb_target}")
        if uses_fw:
            filt.append(f'-A {PROXY_FIREWALL} -m comment --comment "{name} traffic not accepted by {fw_chain}" '
                        f"{match} -d {ip} {dport} -j DROP")
    if not has_external:
        for ip in sp.load_balancer_ips:
            filt.append(f"-A {EXTERNAL_SERVICES} -m comment --comment {external_verdict[1]} {match} -d {ip} {dport} "
                        f"-j {external_verdict[0]}")
    if sp.node_port:
        if sel.has_any:
            nat.append(f'-A {NODEPORTS} -m comment --comment {name} {match} --dport {sp.node_port} -j {ext_chain}')
        if not has_external:
            filt.append(f"-A {EXTERNAL_SERVICES} -m comment --comment {external_verdict[1]} -m addrtype "
                        f"--dst-type LOCAL {match} --dport {sp.node_port} -j {external_verdict[0]}")

    chains = out.chains
    if has_internal and s.masquerade_all:
        chains.setdefault(internal_chain, []).append(
            f'-A {internal_chain} -m comment --comment "{name} cluster IP" {match} -d {sp.cluster_ip} {dport} '
            f"-j {MARK_MASQ}")
    elif has_internal and s.cluster_cidrs:
        # Off-cluster clients of a cluster IP (a route to the service range via this node) are
        # masqueraded, so the answer comes back through here to be un-DNATed.
        chains.setdefault(internal_chain, []).append(
            f'-A {internal_chain} -m comment --comment "{name} cluster IP" {match} -d {sp.cluster_ip} {dport} '
            f"{s.if_not_local()} -j {MARK_MASQ}")
    if uses_ext:
        ext = chains.setdefault(ext_chain, [])
        if not sp.external_local:
            ext.append(f'-A {ext_chain} -m comment --comment "masquerade traffic for {name} external destinations" '
                       f"-j {MARK_MASQ}")
        else:
            if s.cluster_cidrs:
                ext.append(f'-A {ext_chain} -m comment --comment "pod traffic for {name} external destinations" '
                           f"{s.if_local()} -j {svc_chain}")
            ext.append(f'-A {ext_chain} -m comment --comment "masquerade LOCAL traffic for {name} external '
                       f'destinations" -m addrtype --src-type LOCAL -j {MARK_MASQ}')
            ext.append(f'-A {ext_chain} -m comment --comment "route LOCAL traffic for {name} external destinations" '
                       f"-m addrtype --src-type LOCAL -j {svc_chain}")
        if has_external:
            ext.append(f"-A {ext_chain} -j {external_chain}")
    if uses_fw:
        fw = chains.setdefault(fw_chain, [])
        sources = list(sp.source_ranges)
        if s.node_ip and any(_contains(c, s.node_ip) for c in sp.source_ranges):
            sources += list(sp.load_balancer_ips)  # the node reaching its own VIP loops back from the VIP
        fw += [f'-A {fw_chain} -m comment --comment "{name} loadbalancer IP" -s {src} -j {ext_chain}'
               for src in sources]
        fw.append(f'-A {fw_chain} -m comment --comment "other traffic to {name} will be dropped by {PROXY_FIREWALL}"')
    if uses_cluster:
        _to_endpoints(chains.setdefault(svc_chain, []), svc_chain, sp, sel.cluster, large)
    if uses_local:
        _to_endpoints(chains.setdefault(local_chain, []), local_chain, sp, sel.local, large)
    for ep in sel.reachable:
        sep = names.iptables_endpoint_chain(sp.name, ep)
        comment = "" if large else f"-m comment --comment {name} "
        affinity = f"-m recent --name {sep} --set " if sp.affinity_seconds else ""
        chains[sep] = [f"-A {sep} {comment}-s {ep.ip} -j {MARK_MASQ}",  # hairpin: the endpoint calling itself
                       f"-A {sep} {comment}{affinity}{match} -j DNAT --to-destination {ep}"]
    return out


def _to_endpoints(lines: list[str], chain: str, sp: ServicePort, endpoints, large: bool) -> None:
    name = str(sp.name)
    if sp.affinity_seconds:
        for ep in endpoints:
            sep = names.iptables_endpoint_chain(sp.name, ep)
            comment = "" if large else f'-m comment --comment "{name} -> {ep}" '
            lines.append(f"-A {chain} {comment}-m recent --name {sep} --rcheck --seconds {sp.affinity_seconds} "
                         f"--reap -j {sep}")
    n = len(endpoints)
    for i, ep in enumerate(endpoints):
        comment = "" if large else f'-m comment --comment "{name} -> {ep}" '
        chance = f"-m statistic --mode random --probability {1.0 / (n - i):0.10f} " if i < n - 1 else ""
        lines.append(f"-A {chain} {comment}{chance}-j {names.iptables_endpoint_chain(sp.name, ep)}")


def _contains(cidr: str, ip: str) -> bool:
    import ipaddress

    return ipaddress.ip_address(ip) in ipaddress.ip_network(cidr, strict=False)


def fixed_rules(s: RuleSettings) -> tuple[list[str], list[str]]:
    """(nat, filter) rules of the fixed chains that are not the Services' dispatch."""
    mark = s.mark
    masquerade = '-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE'
    nat = [f"-A {POSTROUTING} -m mark ! --mark {mark}/{mark} -j RETURN",
           f"-A {POSTROUTING} -j MARK --xor-mark {mark}",  # clear it: a packet may come this way again
           masquerade + (" --random-fully" if s.random_fully else ""),
           f"-A {MARK_MASQ} -j MARK --or-mark {mark}"]
    filt = []
    if s.localhost_nodeports:
        filt.append(f'-A {KUBELET_FIREWALL} -m comment --comment "block incoming localnet connections" '
                    "-d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP")
    return nat, filt


def nodeports_jump(s: RuleSettings) -> list[str]:
    """The last rules of nat KUBE-SERVICES: traffic to this node's addresses tries the NodePorts."""
    comment = '-m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain"'
    if s.nodeport_ips is None:
        loopback = "" if s.localhost_nodeports else " ! -d 127.0.0.0/8"
        return [f"-A {SERVICES} {comment} -m addrtype --dst-type LOCAL{loopback} -j {NODEPORTS}"]
    return [f"-A {SERVICES} {comment} -d {ip} -j {NODEPORTS}" for ip in s.nodeport_ips
            if s.localhost_nodeports or not ip.startswith("127.")]


def forward_rules(s: RuleSettings) -> list[str]:
    mark = s.mark
    out = [] if s.conntrack_liberal else [f"-A {FORWARD} -m conntrack --ctstate INVALID -j DROP"]
    return out + [f'-A {FORWARD} -m comment --comment "kubernetes forwarding rules" -m mark --mark {mark}/{mark} '
                  "-j ACCEPT",
                  f'-A {FORWARD} -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack '
                  "--ctstate RELATED,ESTABLISHED -j ACCEPT"]
