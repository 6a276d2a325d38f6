"""The IPVS mode's ipsets and its few iptables rules: pure functions of the desired state.

IPVS does the load balancing; iptables only marks what must be masqueraded and filters, matching
the ipsets instead of one rule per Service, as kube-proxy's IPVS proxier does:

nat    PREROUTING, OUTPUT -> KUBE-SERVICES: cluster IPs from outside the cluster CIDR, external
       IPs, load balancer IPs (KUBE-LOAD-BALANCER) and NodePorts (KUBE-NODE-PORT, for traffic to
       a local address) get KUBE-MARK-MASQ, except for the `Local` policy's sets; POSTROUTING ->
       KUBE-POSTROUTING masquerades marked packets and hairpin traffic (KUBE-LOOP-BACK).
filter KUBE-FORWARD accepts marked and established traffic; KUBE-PROXY-FIREWALL and
       KUBE-SOURCE-RANGES-FIREWALL apply loadBalancerSourceRanges; KUBE-IPVS-FILTER rejects new
       connections to a Service IP on a port that is not the Service's (the address is local
       on kube-ipvs0, so the node's own listeners would answer otherwise).
"""

from __future__ import annotations

from pykubelet.proxy.iptables_rules import MARK_MASQ, POSTROUTING, SERVICES, Jump
from pykubelet.proxy.ipvs_state import (CLUSTER_IP, EXTERNAL_IP, EXTERNAL_IP_LOCAL, HEALTH_CHECK_NODE_PORT, IPVS_IPS,
                                        LOAD_BALANCER, LOAD_BALANCER_FW, LOAD_BALANCER_LOCAL, LOAD_BALANCER_SOURCE_CIDR,
                                        LOAD_BALANCER_SOURCE_IP, LOOP_BACK, NODE_PORT, NODE_PORT_LOCAL, DesiredState,
                                        IpvsSettings)

NODE_PORT_CHAIN, LOAD_BALANCER_CHAIN, FORWARD = "KUBE-NODE-PORT", "KUBE-LOAD-BALANCER", "KUBE-FORWARD"
PROXY_FIREWALL, SOURCE_RANGES_FIREWALL = "KUBE-PROXY-FIREWALL", "KUBE-SOURCE-RANGES-FIREWALL"
IPVS_FILTER, IPVS_OUT_FILTER = "KUBE-IPVS-FILTER", "KUBE-IPVS-OUT-FILTER"
NAT_CHAINS = (SERVICES, POSTROUTING, NODE_PORT_CHAIN, LOAD_BALANCER_CHAIN, MARK_MASQ)
FILTER_CHAINS = (FORWARD, NODE_PORT_CHAIN, PROXY_FIREWALL, SOURCE_RANGES_FIREWALL, IPVS_FILTER, IPVS_OUT_FILTER)
CHAINS = {"nat": set(NAT_CHAINS), "filter": set(FILTER_CHAINS)}

# The jumps from the built-in chains, in kube-proxy's order (each is inserted at the top).
JUMPS = (
    Jump("nat", "OUTPUT", SERVICES, "kubernetes service portals"),
    Jump("nat", "PREROUTING", SERVICES, "kubernetes service portals"),
    Jump("nat", "POSTROUTING", POSTROUTING, "kubernetes postrouting rules"),
    Jump("filter", "FORWARD", FORWARD, "kubernetes forwarding rules"),
    Jump("filter", "INPUT", NODE_PORT_CHAIN, "kubernetes health check rules"),
    Jump("filter", "INPUT", PROXY_FIREWALL, "kube-proxy firewall rules"),
    Jump("filter", "FORWARD", PROXY_FIREWALL, "kube-proxy firewall rules"),
    Jump("filter", "INPUT", IPVS_FILTER, "kubernetes ipvs access filter"),
    Jump("filter", "OUTPUT", IPVS_OUT_FILTER, "kubernetes ipvs access filter"),
)

# name -> (ipset type, comment), kube-proxy's.
IPSETS = {
    LOOP_BACK: ("hash:ip,port,ip", "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose"),
    CLUSTER_IP: ("hash:ip,port", "Kubernetes service cluster ip + port for masquerade purpose"),
    EXTERNAL_IP: ("hash:ip,port", "Kubernetes service external ip + port for masquerade and filter purpose"),
    EXTERNAL_IP_LOCAL: ("hash:ip,port", "Kubernetes service external ip + port with externalTrafficPolicy=local"),
    LOAD_BALANCER: ("hash:ip,port", "Kubernetes service lb portal"),
    LOAD_BALANCER_FW: ("hash:ip,port", "Kubernetes service load balancer ip + port for load balancer with sourceRange"),
    LOAD_BALANCER_LOCAL: ("hash:ip,port",
                          "Kubernetes service load balancer ip + port with externalTrafficPolicy=local"),
    LOAD_BALANCER_SOURCE_IP: ("hash:ip,port,ip",
                              "Kubernetes service load balancer ip + port + source IP for packet filter purpose"),
    LOAD_BALANCER_SOURCE_CIDR: ("hash:ip,port,net",
                                "Kubernetes service load balancer ip + port + source cidr for packet filter purpose"),
    NODE_PORT["tcp"]: ("bitmap:port", "Kubernetes nodeport TCP port for masquerade purpose"),
    NODE_PORT_LOCAL["tcp"]: ("bitmap:port", "Kubernetes nodeport TCP port with externalTrafficPolicy=local"),
    NODE_PORT["udp"]: ("bitmap:port", "Kubernetes nodeport UDP port for masquerade purpose"),
    NODE_PORT_LOCAL["udp"]: ("bitmap:port", "Kubernetes nodeport UDP port with externalTrafficPolicy=local"),
    NODE_PORT["sctp"]: ("hash:ip,port", "Kubernetes nodeport SCTP port for masquerade purpose with type 'hash ip:port'"),
    NODE_PORT_LOCAL["sctp"]: ("hash:ip,port", "Kubernetes nodeport SCTP port with externalTrafficPolicy=local with "
                                              "type 'hash ip:port'"),
    HEALTH_CHECK_NODE_PORT: ("bitmap:port", "Kubernetes health check node port"),
    IPVS_IPS: ("hash:ip", "Addresses on the ipvs interface"),
}

# (set, table, from chain, to, match, protocol): the set-match rules, in kube-proxy's order (a
# `Local` NodePort set must come before its masquerading one).
SET_RULES = (
    (LOOP_BACK, "nat", POSTROUTING, "MASQUERADE", "dst,dst,src", ""),
    (LOAD_BALANCER, "nat", SERVICES, LOAD_BALANCER_CHAIN, "dst,dst", ""),
    (LOAD_BALANCER_LOCAL, "nat", LOAD_BALANCER_CHAIN, "RETURN", "dst,dst", ""),
    (NODE_PORT_LOCAL["tcp"], "nat", NODE_PORT_CHAIN, "RETURN", "dst", "tcp"),
    (NODE_PORT["tcp"], "nat", NODE_PORT_CHAIN, MARK_MASQ, "dst", "tcp"),
    (NODE_PORT_LOCAL["udp"], "nat", NODE_PORT_CHAIN, "RETURN", "dst", "udp"),
    (NODE_PORT["udp"], "nat", NODE_PORT_CHAIN, MARK_MASQ, "dst", "udp"),
    (NODE_PORT_LOCAL["sctp"], "nat", NODE_PORT_CHAIN, "RETURN", "dst,dst", "sctp"),
    (NODE_PORT["sctp"], "nat", NODE_PORT_CHAIN, MARK_MASQ, "dst,dst", "sctp"),
    (LOAD_BALANCER_FW, "filter", PROXY_FIREWALL, SOURCE_RANGES_FIREWALL, "dst,dst", ""),
    (LOAD_BALANCER_SOURCE_CIDR, "filter", SOURCE_RANGES_FIREWALL, "RETURN", "dst,dst,src", ""),
    (LOAD_BALANCER_SOURCE_IP, "filter", SOURCE_RANGES_FIREWALL, "RETURN", "dst,dst,src", ""),
)


def _match(name: str, how: str, comment: bool = True) -> str:
    text = f'-m comment --comment "{IPSETS[name][1]}" ' if comment else ""
    return f"{text}-m set --match-set {name} {how}"


def rules(state: DesiredState, s: IpvsSettings) -> tuple[list[str], list[str]]:
    """(nat, filter) -A lines of our chains."""
    has = {name for name, entries in state.members.items() if entries}
    nat = [f"-A {SERVICES} -s 127.0.0.0/8 -j RETURN"]
    filt: list[str] = []
    for name, table, source, target, how, proto in SET_RULES:
        if name in has:
            line = f"-A {source} " + (f"-p {proto} " if proto else "") + f"{_match(name, how)} -j {target}"
            (nat if table == "nat" else filt).append(line)
    if CLUSTER_IP in has:
        # Off-cluster clients of a cluster IP (a route to the service range via this node) are
        # masqueraded; with no cluster CIDR, the node's own connections from a VIP are.
        if s.masquerade_all:
            nat.append(f"-A {SERVICES} {_match(CLUSTER_IP, 'dst,dst')} -j {MARK_MASQ}")
        elif s.cluster_cidrs:
            nat.append(f"-A {SERVICES} {_match(CLUSTER_IP, 'dst,dst')} {s.if_not_local()} -j {MARK_MASQ}")
        else:
            nat.append(f"-A {SERVICES} {_match(CLUSTER_IP, 'src,dst')} -j {MARK_MASQ}")
    for name in (EXTERNAL_IP, EXTERNAL_IP_LOCAL):
        if name in has:
            match = f"-A {SERVICES} {_match(name, 'dst,dst')}"
            if name == EXTERNAL_IP:
                nat.append(f"{match} -j {MARK_MASQ}")
            # from off the node (not a bridge port, not a local source), or to a local address
            nat.append(f"{match} -m physdev ! --physdev-is-in -m addrtype ! --src-type LOCAL -j ACCEPT")
            nat.append(f"{match} -m addrtype --dst-type LOCAL -j ACCEPT")
    nat.append(f"-A {SERVICES} -m addrtype --dst-type LOCAL -j {NODE_PORT_CHAIN}")
    nat.append(f"-A {LOAD_BALANCER_CHAIN} -j {MARK_MASQ}")
    filt.append(f"-A {SOURCE_RANGES_FIREWALL} -j DROP")
    filt += [f"-A {IPVS_OUT_FILTER} -s {ip} -m ipvs --vaddr {ip} --vproto {proto} --vport {port} -j DROP"
             for ip, proto, port in state.no_node_access]
    nat += [f"-A {SERVICES} {_match(name, 'dst,dst', False)} -j ACCEPT" for name in (CLUSTER_IP, LOAD_BALANCER)
            if name in has]
    mark = s.mark
    filt += [f'-A {FORWARD} -m comment --comment "kubernetes forwarding rules" -m mark --mark {mark}/{mark} -j ACCEPT',
             f'-A {FORWARD} -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack '
             "--ctstate RELATED,ESTABLISHED -j ACCEPT",
             f"-A {NODE_PORT_CHAIN} {_match(HEALTH_CHECK_NODE_PORT, 'dst')} -j ACCEPT"]
    filt += [f"-A {IPVS_FILTER} {_match(name, how, False)} -j RETURN"
             for name, how in ((LOAD_BALANCER, "dst,dst"), (CLUSTER_IP, "dst,dst"), (EXTERNAL_IP, "dst,dst"),
                               (EXTERNAL_IP_LOCAL, "dst,dst"), (HEALTH_CHECK_NODE_PORT, "dst"))]
    filt.append(f"-A {IPVS_FILTER} -m conntrack --ctstate NEW {_match(IPVS_IPS, 'dst', False)} -j REJECT")
    masquerade = f'-A {POSTROUTING} -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE'
    nat += [f"-A {POSTROUTING} -m mark ! --mark {mark}/{mark} -j RETURN",
            f"-A {POSTROUTING} -j MARK --xor-mark {mark}",  # clear it: a packet may come this way again
            masquerade + (" --random-fully" if s.random_fully else ""),
            f"-A {MARK_MASQ} -j MARK --or-mark {mark}"]
    return nat, filt


def restore_text(state: DesiredState, s: IpvsSettings, missing_jumps: list[Jump]) -> str:
    """One iptables-restore --noflush batch: our chains emptied and refilled, missing jumps added."""
    nat, filt = rules(state, s)
    filt += [f"-I {j.source} {j.rule()}" for j in missing_jumps if j.table == "filter"]
    nat += [f"-I {j.source} {j.rule()}" for j in missing_jumps if j.table == "nat"]
    lines = ["*filter", *(f":{c} - [0:0]" for c in FILTER_CHAINS), *filt, "COMMIT",
             "*nat", *(f":{c} - [0:0]" for c in NAT_CHAINS), *nat, "COMMIT", ""]
    return "\n".join(lines)
