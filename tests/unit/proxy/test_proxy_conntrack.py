"""Stale UDP flows: those to a UDP Service's addresses whose reply is not from a serving endpoint."""

from __future__ import annotations

from pykubelet.proxy.conntrack import stale, udp_changed
from tests.unit.proxy.helpers import ep, svc


def test_flows_to_an_endpoint_that_is_gone_are_stale_and_the_others_are_not():
    dns = svc("dns", cluster_ip="10.96.0.10", port=53, protocol="UDP", node_port=30053,
              endpoints=(ep("10.244.1.5", 53), ep("10.244.2.6", 53, ready=False, serving=False)))
    web = svc("web", cluster_ip="10.96.0.20", endpoints=(ep("10.244.1.7"),))  # TCP: never touched
    flows = [("10.96.0.10", 53, "10.244.1.5", 53),    # to the live endpoint
             ("10.96.0.10", 53, "10.244.9.9", 53),    # to one that is gone
             ("10.96.0.10", 53, "10.244.2.6", 53),    # to one that no longer serves
             ("10.250.0.31", 30053, "10.244.9.9", 53),  # its NodePort, to one that is gone
             ("10.96.0.20", 80, "10.244.9.9", 80),    # someone else's Service
             ("8.8.8.8", 53, "8.8.8.8", 53)]          # not a Service at all
    assert stale([dns, web], flows) == [1, 2, 3]


def test_a_udp_service_without_serving_endpoints_keeps_its_flows():
    dns = svc("dns", cluster_ip="10.96.0.10", port=53, protocol="UDP")
    assert stale([dns], [("10.96.0.10", 53, "10.244.9.9", 53)]) == []


def test_only_changes_of_udp_endpoints_call_for_a_cleanup():
    udp1 = svc("dns", port=53, protocol="UDP", endpoints=(ep("10.244.1.5", 53),))
    udp2 = svc("dns", port=53, protocol="UDP", endpoints=(ep("10.244.1.6", 53),))
    tcp1, tcp2 = svc("web", endpoints=(ep("10.244.1.7"),)), svc("web", endpoints=())
    assert not udp_changed({udp1.name: udp1, tcp1.name: tcp1}, {udp1.name: udp1, tcp2.name: tcp2})
    assert udp_changed({udp1.name: udp1}, {udp2.name: udp2})
    assert udp_changed({udp1.name: udp1}, {})
