"""The IPVS mode's desired state: kube-proxy's virtual servers, real servers, kube-ipvs0 addresses
and ipset members for each kind of Service."""

from __future__ import annotations

from pykubelet.proxy.ipvs_state import (CLUSTER_IP, EXTERNAL_IP, EXTERNAL_IP_LOCAL, FLAG_PERSISTENT, FLAG_SOURCE_HASH,
                                        IPVS_IPS, LOAD_BALANCER, LOAD_BALANCER_FW, LOAD_BALANCER_LOCAL,
                                        LOAD_BALANCER_SOURCE_CIDR, LOAD_BALANCER_SOURCE_IP, LOOP_BACK, NODE_PORT,
                                        NODE_PORT_LOCAL, IpvsSettings, PortResult, RealServer, VirtualServer,
                                        desired_state)
from tests.unit.proxy.helpers import ep, svc

SETTINGS = IpvsSettings(cluster_cidrs=("10.244.0.0/16",), node_ip="192.168.1.10")
NODE = ["192.168.1.10", "10.244.0.1"]


def state(*ports, settings=SETTINGS, node=NODE):
    return desired_state({p.name: p for p in ports}, settings, list(node))


def rs(*addresses: str, port: int = 80) -> frozenset[RealServer]:
    return frozenset(RealServer(a, port) for a in addresses)


def test_a_cluster_ip_is_one_round_robin_virtual_server_on_kube_ipvs0_with_the_ready_endpoints():
    out = state(svc(endpoints=(ep("10.244.1.5"), ep("10.244.2.6"), ep("10.244.2.7", ready=False))))
    assert out.services == {"10.20.30.41:80/TCP": VirtualServer("10.20.30.41", 80, "TCP", "rr", 0, 0)}
    assert out.destinations == {"10.20.30.41:80/TCP": rs("10.244.1.5", "10.244.2.6")}
    assert out.bound == {"10.20.30.41"}
    assert out.members == {CLUSTER_IP: {"10.20.30.41,tcp:80"}, IPVS_IPS: {"10.20.30.41"}}


def test_with_no_ready_endpoint_the_serving_terminating_ones_take_the_traffic():
    out = state(svc(endpoints=(ep("10.244.1.5", ready=False, serving=True, terminating=True),
                               ep("10.244.1.6", ready=False))))
    assert out.destinations["10.20.30.41:80/TCP"] == rs("10.244.1.5")


def test_client_ip_affinity_is_persistence_with_its_timeout_and_mh_adds_source_hashing():
    out = state(svc(endpoints=(ep("10.244.1.5"),), affinity_seconds=600, protocol="UDP", port=53),
                settings=IpvsSettings(scheduler="mh"))
    assert out.services["10.20.30.41:53/UDP"] == VirtualServer("10.20.30.41", 53, "UDP", "mh",
                                                               FLAG_PERSISTENT | FLAG_SOURCE_HASH, 600)
    assert out.members[CLUSTER_IP] == {"10.20.30.41,udp:53"}


def test_a_node_port_is_a_virtual_server_on_each_node_address_not_bound_to_kube_ipvs0():
    out = state(svc(endpoints=(ep("10.244.1.5"),), node_port=30080))
    assert set(out.services) == {"10.20.30.41:80/TCP", "192.168.1.10:30080/TCP", "10.244.0.1:30080/TCP"}
    assert out.destinations["192.168.1.10:30080/TCP"] == rs("10.244.1.5")
    assert out.bound == {"10.20.30.41"} and out.members[NODE_PORT["tcp"]] == {"30080"}
    udp = state(svc(endpoints=(ep("10.244.1.5"),), node_port=30053, protocol="UDP"))
    assert udp.members[NODE_PORT["udp"]] == {"30053"}
    sctp = state(svc(endpoints=(ep("10.244.1.5"),), node_port=30099, protocol="SCTP"))
    assert sctp.members[NODE_PORT["sctp"]] == {"192.168.1.10,sctp:30099", "10.244.0.1,sctp:30099"}


def test_node_port_addresses_pick_where_node_ports_listen_never_on_loopback():
    settings = IpvsSettings(nodeport_ips=("192.168.1.10", "127.0.0.1"))
    out = state(svc(endpoints=(ep("10.244.1.5"),), node_port=30080), settings=settings)
    assert set(out.services) == {"10.20.30.41:80/TCP", "192.168.1.10:30080/TCP"}
    nowhere = state(svc(endpoints=(ep("10.244.1.5"),), node_port=30080), settings=IpvsSettings(nodeport_ips=()))
    assert set(nowhere.services) == {"10.20.30.41:80/TCP"} and NODE_PORT["tcp"] not in nowhere.members


def test_external_ips_are_bound_unless_the_node_has_them_and_local_policy_uses_its_own_set():
    out = state(svc(endpoints=(ep("10.244.1.5"),), external_ips=("203.0.113.7", "192.168.1.10")))
    assert {"203.0.113.7:80/TCP", "192.168.1.10:80/TCP"} <= set(out.services)
    assert out.bound == {"10.20.30.41", "203.0.113.7"}
    assert out.members[EXTERNAL_IP] == {"203.0.113.7,tcp:80", "192.168.1.10,tcp:80"}
    local = state(svc(endpoints=(ep("10.244.1.5", local=True),), external_ips=("203.0.113.7",), external_local=True))
    assert local.members[EXTERNAL_IP_LOCAL] == {"203.0.113.7,tcp:80"} and EXTERNAL_IP not in local.members


def test_load_balancer_source_ranges_fill_the_firewall_sets_and_keep_out_a_node_they_exclude():
    port = svc(endpoints=(ep("10.244.1.5"),), load_balancer_ips=("198.51.100.9",),
               source_ranges=("203.0.113.0/24", "192.0.2.1/32"))
    out = state(port)
    assert out.members[LOAD_BALANCER] == out.members[LOAD_BALANCER_FW] == {"198.51.100.9,tcp:80"}
    # a /32 is spelled as ipset lists it, so a full sync reads back what it wrote
    assert out.members[LOAD_BALANCER_SOURCE_CIDR] == {"198.51.100.9,tcp:80,203.0.113.0/24",
                                                      "198.51.100.9,tcp:80,192.0.2.1"}
    assert out.no_node_access == [("198.51.100.9", "tcp", 80)] and LOAD_BALANCER_SOURCE_IP not in out.members
    allowed = state(svc(endpoints=(ep("10.244.1.5"),), load_balancer_ips=("198.51.100.9",),
                        source_ranges=("192.168.0.0/16",)))
    assert allowed.members[LOAD_BALANCER_SOURCE_IP] == {"198.51.100.9,tcp:80,198.51.100.9"}
    assert allowed.no_node_access == [] and "198.51.100.9" in allowed.bound


def test_external_local_policy_sends_outside_traffic_to_local_endpoints_and_the_cluster_ip_to_all():
    port = svc(endpoints=(ep("10.244.1.5", local=True), ep("10.244.2.6")), node_port=30080, external_local=True,
               load_balancer_ips=("198.51.100.9",))
    out = state(port)
    assert out.destinations["10.20.30.41:80/TCP"] == rs("10.244.1.5", "10.244.2.6")
    assert out.destinations["192.168.1.10:30080/TCP"] == out.destinations["198.51.100.9:80/TCP"] == rs("10.244.1.5")
    assert out.members[NODE_PORT_LOCAL["tcp"]] == {"30080"} and out.members[NODE_PORT["tcp"]] == {"30080"}
    assert out.members[LOAD_BALANCER_LOCAL] == {"198.51.100.9,tcp:80"}
    assert out.results[port.name] == PortResult()


def test_with_no_local_endpoint_a_local_policy_keeps_the_cluster_endpoints_so_local_pods_get_through():
    port = svc(endpoints=(ep("10.244.2.6"),), node_port=30080, external_local=True)
    out = state(port)
    assert out.destinations["192.168.1.10:30080/TCP"] == rs("10.244.2.6")
    assert out.results[port.name] == PortResult(no_local_internal=False, no_local_external=True)
    internal = svc(endpoints=(ep("10.244.2.6"),), internal_local=True)
    out = state(internal)
    assert out.destinations["10.20.30.41:80/TCP"] == frozenset()  # no cluster endpoints for Local-only traffic
    assert out.results[internal.name] == PortResult(no_local_internal=True, no_local_external=False)


def test_local_endpoints_are_in_the_hairpin_set_whatever_their_state():
    out = state(svc(endpoints=(ep("10.244.0.5", local=True, ready=False), ep("10.244.2.6")), port=53, protocol="UDP"))
    assert out.members[LOOP_BACK] == {"10.244.0.5,udp:80,10.244.0.5"}


def test_no_service_no_state():
    out = state()
    assert (out.services, out.bound, out.members) == ({}, set(), {})
