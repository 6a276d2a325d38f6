"""The IPVS mode's iptables rules and kernel records: kube-proxy's set matches, masquerading and
jumps as restore text; virtual and real servers as pyroute2 encodes them; ipset entries; sysctls."""

from __future__ import annotations

from types import SimpleNamespace


from pykubelet.proxy import ipvs
from pykubelet.proxy.ipvs_ipsets import entry_text, entry_value
from pykubelet.proxy.ipvs_kernel import dest_record, parse_dest, parse_service, service_record
from pykubelet.proxy.ipvs_rules import IPSETS, JUMPS, restore_text, rules
from pykubelet.proxy.ipvs_state import IpvsSettings, RealServer, VirtualServer, desired_state
from tests.unit.proxy.helpers import ep, ipvs_roundtrip, svc

SETTINGS = IpvsSettings(cluster_cidrs=("10.244.0.0/16",), node_ip="192.168.1.10")
MASQ_CLUSTER_IPS = ('-A KUBE-SERVICES -m comment --comment "Kubernetes service cluster ip + port for masquerade purpose" '
                    "-m set --match-set KUBE-CLUSTER-IP dst,dst")


def rules_for(*ports, settings=SETTINGS):
    return rules(desired_state({p.name: p for p in ports}, settings, ["192.168.1.10"]), settings)


def test_cluster_ips_from_outside_the_cluster_cidr_are_masqueraded_and_accepted():
    nat, filt = rules_for(svc(endpoints=(ep("10.244.1.5"),)))
    assert nat[0] == "-A KUBE-SERVICES -s 127.0.0.0/8 -j RETURN"
    assert f"{MASQ_CLUSTER_IPS} ! -s 10.244.0.0/16 -j KUBE-MARK-MASQ" in nat
    assert nat.index("-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT") < \
        nat.index("-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT")
    assert nat[-4:] == ["-A KUBE-POSTROUTING -m mark ! --mark 0x004000/0x004000 -j RETURN",
                        "-A KUBE-POSTROUTING -j MARK --xor-mark 0x004000",
                        '-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" '
                        "-j MASQUERADE --random-fully",
                        "-A KUBE-MARK-MASQ -j MARK --or-mark 0x004000"]
    # only the Service's own ports answer on a VIP: new connections to others are rejected
    assert filt[-1] == "-A KUBE-IPVS-FILTER -m conntrack --ctstate NEW -m set --match-set KUBE-IPVS-IPS dst -j REJECT"
    assert not any("KUBE-LOAD-BALANCER dst,dst -j KUBE-LOAD-BALANCER" in line for line in nat)  # empty set: no rule


def test_masquerade_all_and_no_cluster_cidr_are_kube_proxys_variants():
    nat, _ = rules_for(svc(), settings=IpvsSettings(masquerade_all=True))
    assert f"{MASQ_CLUSTER_IPS} -j KUBE-MARK-MASQ" in nat
    nat, _ = rules_for(svc(), settings=IpvsSettings())
    assert any(line.startswith("-A KUBE-SERVICES -m comment") and "KUBE-CLUSTER-IP src,dst -j KUBE-MARK-MASQ" in line
               for line in nat)


def test_node_ports_are_masqueraded_unless_local_and_the_local_set_comes_first():
    nat, _ = rules_for(svc(endpoints=(ep("10.244.1.5", local=True),), node_port=30080, external_local=True))
    local = next(i for i, line in enumerate(nat) if "KUBE-NODE-PORT-LOCAL-TCP dst -j RETURN" in line)
    masq = next(i for i, line in enumerate(nat) if "KUBE-NODE-PORT-TCP dst -j KUBE-MARK-MASQ" in line)
    assert local < masq and nat[masq].startswith("-A KUBE-NODE-PORT -p tcp ")
    assert any("KUBE-LOOP-BACK dst,dst,src -j MASQUERADE" in line for line in nat)


def test_a_load_balancer_excluding_the_node_is_dropped_for_the_node_itself():
    _, filt = rules_for(svc(endpoints=(ep("10.244.1.5"),), load_balancer_ips=("198.51.100.9",),
                            source_ranges=("203.0.113.0/24",)))
    assert ("-A KUBE-IPVS-OUT-FILTER -s 198.51.100.9 -m ipvs --vaddr 198.51.100.9 --vproto tcp --vport 80 -j DROP"
            in filt)
    assert "-A KUBE-SOURCE-RANGES-FIREWALL -j DROP" in filt


def test_the_batch_empties_and_refills_every_chain_and_adds_only_the_missing_jumps():
    state = desired_state({}, SETTINGS, [])
    text = restore_text(state, SETTINGS, [JUMPS[0], JUMPS[3]])
    assert ":KUBE-IPVS-FILTER - [0:0]" in text and ":KUBE-LOAD-BALANCER - [0:0]" in text
    assert '-I OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES' in text
    assert '-I FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD' in text
    assert text.count("-I ") == 2 and text.index("*filter") < text.index("*nat") and text.endswith("COMMIT\n")


def test_a_virtual_server_is_encoded_with_a_host_netmask_and_read_back_without_the_hashed_flag():
    vs = VirtualServer("10.96.0.10", 53, "UDP", "rr", 0x1, 10800)
    msg = ipvs_roundtrip(("IPVS_CMD_ATTR_SERVICE", service_record(vs).dump_nla()))
    svc_attr = msg.get_attr("IPVS_CMD_ATTR_SERVICE")
    assert svc_attr.get_attr("IPVS_SVC_ATTR_NETMASK") == "255.255.255.255"
    assert parse_service(msg) == vs
    hashed = ipvs_roundtrip(("IPVS_CMD_ATTR_SERVICE", service_record(VirtualServer("10.96.0.1", 443, "TCP", "lc", 0x3))
                         .dump_nla()))
    assert parse_service(hashed) == VirtualServer("10.96.0.1", 443, "TCP", "lc", 0x1)


def test_a_real_server_is_masqueraded_with_its_weight_and_read_back():
    msg = ipvs_roundtrip(("IPVS_CMD_ATTR_SERVICE", service_record(VirtualServer("10.96.0.10", 53, "UDP")).dump_key()),
                     ("IPVS_CMD_ATTR_DEST", dest_record(RealServer("10.244.1.5", 5353), 0).dump_nla()))
    # IP_VS_CONN_F_MASQ is 0 (pyroute2's default, 3, is direct routing: the pod would get packets
    # still addressed to the cluster IP, and a connection to it would time out)
    assert msg.get_attr("IPVS_CMD_ATTR_DEST").get_attr("IPVS_DEST_ATTR_FWD_METHOD") == 0
    dest = parse_dest(msg)
    assert (dest.server, dest.weight, dest.masquerading) == (RealServer("10.244.1.5", 5353), 0, True)


def test_a_real_server_reached_another_way_is_read_back_as_not_masqueraded():
    direct = dest_record(RealServer("10.244.1.5", 8080), 1)
    direct["fwd_method"] = 3  # as `ipvsadm -a ... -g` or pyroute2's default would leave it
    msg = ipvs_roundtrip(("IPVS_CMD_ATTR_SERVICE", service_record(VirtualServer("10.96.0.10", 80, "TCP")).dump_key()),
                         ("IPVS_CMD_ATTR_DEST", direct.dump_nla()))
    assert parse_dest(msg).masquerading is False


def _attrs(**values):
    return SimpleNamespace(get_attr=lambda name: values.get(name))


def test_ipset_entries_keep_ipsets_spelling_both_ways():
    ip = _attrs(IPSET_ATTR_IPADDR_IPV4="10.96.0.1")
    data = _attrs(IPSET_ATTR_IP_FROM=ip, IPSET_ATTR_PROTO=6, IPSET_ATTR_PORT_FROM=443)
    assert entry_text(IPSETS["KUBE-CLUSTER-IP"][0], data) == "10.96.0.1,tcp:443"
    net = _attrs(IPSET_ATTR_IP_FROM=ip, IPSET_ATTR_PROTO=17, IPSET_ATTR_PORT_FROM=53,
                 IPSET_ATTR_IP2=_attrs(IPSET_ATTR_IPADDR_IPV4="10.0.0.0"), IPSET_ATTR_CIDR2=8)
    assert entry_text("hash:ip,port,net", net) == "10.96.0.1,udp:53,10.0.0.0/8"
    assert entry_text("bitmap:port", _attrs(IPSET_ATTR_PORT_FROM=30080)) == "30080"
    value, etype = entry_value("hash:ip,port,ip", "10.244.0.5,udp:53,10.244.0.5")
    assert etype == "ip,port,ip" and (value[0], value[1].port, value[1].protocol, value[2]) == \
        ("10.244.0.5", 53, 17, "10.244.0.5")
    assert entry_value("bitmap:port", "30080") == (30080, "port")


def test_kube_proxys_sysctls_and_conn_reuse_mode_only_on_the_kernels_that_need_it():
    assert ipvs.sysctls(False, "6.1.0-25-amd64") == {"ipv4/vs/conntrack": "1", "ipv4/vs/expire_nodest_conn": "1",
                                                     "ipv4/vs/expire_quiescent_template": "1",
                                                     "ipv4/ip_forward": "1"}
    strict = ipvs.sysctls(True, "5.4.0")
    assert strict["ipv4/conf/all/arp_ignore"] == "1" and strict["ipv4/conf/all/arp_announce"] == "2"
    assert strict["ipv4/vs/conn_reuse_mode"] == "0"
