"""Endpoint selection: ready endpoints; serving-and-terminating ones only when none is ready;
Local policies use this node's endpoints (with the same fallback)."""

from __future__ import annotations

from pykubelet.proxy.selection import select
from tests.unit.proxy.helpers import ep, svc


def ips(endpoints) -> list[str]:
    return [e.ip for e in endpoints]


def test_cluster_traffic_goes_to_the_ready_endpoints_only():
    sel = select(svc(endpoints=(ep("10.0.0.1"), ep("10.0.0.2", ready=False, serving=True, terminating=True),
                                ep("10.0.0.3", ready=False, serving=False))))
    assert ips(sel.cluster) == ["10.0.0.1"] and ips(sel.reachable) == ["10.0.0.1"]
    assert sel.has_any and sel.local == ()


def test_serving_terminating_endpoints_take_over_when_none_is_ready():
    sel = select(svc(endpoints=(ep("10.0.0.1", ready=False, serving=True, terminating=True),
                                ep("10.0.0.2", ready=False, serving=False, terminating=True),
                                ep("10.0.0.3", ready=False, serving=True))))  # serving but not terminating: no
    assert ips(sel.cluster) == ["10.0.0.1"] and sel.has_any


def test_no_usable_endpoint_means_none_at_all():
    sel = select(svc(endpoints=(ep("10.0.0.1", ready=False, serving=False),)))
    assert sel.cluster == () and not sel.has_any


def test_internal_traffic_policy_local_uses_only_this_nodes_endpoints():
    port = svc(internal_local=True, endpoints=(ep("10.0.0.1", local=True), ep("10.0.0.2")))
    sel = select(port)
    assert ips(sel.local) == ["10.0.0.1"] and sel.cluster == () and ips(sel.reachable) == ["10.0.0.1"]
    # With no local endpoint, the Service still has endpoints (elsewhere): drop, don't reject.
    sel = select(svc(internal_local=True, endpoints=(ep("10.0.0.2"),)))
    assert sel.local == () and sel.has_any


def test_external_policy_local_keeps_cluster_endpoints_for_internal_traffic():
    port = svc(node_port=30080, external_local=True,
               endpoints=(ep("10.0.0.1"), ep("10.0.0.2", local=True), ep("10.0.0.3", local=True, ready=False,
                                                                            serving=True, terminating=True)))
    sel = select(port)
    assert ips(sel.cluster) == ["10.0.0.1", "10.0.0.2"]
    assert ips(sel.local) == ["10.0.0.2"]
    assert ips(sel.reachable) == ["10.0.0.1", "10.0.0.2"]


def test_local_falls_back_to_local_serving_terminating_and_reachable_merges_both():
    port = svc(node_port=30080, external_local=True,
               endpoints=(ep("10.0.0.1"), ep("10.0.0.3", local=True, ready=False, serving=True, terminating=True)))
    sel = select(port)
    assert ips(sel.cluster) == ["10.0.0.1"] and ips(sel.local) == ["10.0.0.3"]
    assert ips(sel.reachable) == ["10.0.0.1", "10.0.0.3"]


def test_external_policy_local_without_a_way_in_from_outside_is_cluster_policy():
    # eTP Local means nothing for a port nobody reaches from outside (no NodePort/external IP/LB).
    port = svc(external_local=True, endpoints=(ep("10.0.0.1"), ep("10.0.0.2", local=True)))
    assert not port.uses_local_endpoints
    assert ips(select(port).cluster) == ["10.0.0.1", "10.0.0.2"]
