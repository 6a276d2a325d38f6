"""The IPVS sync's diff: which virtual and real servers to add, change and delete, and the
graceful removal of real servers that still carry connections (kube-proxy's termination list)."""

from __future__ import annotations

from pykubelet.proxy.ipvs_diff import (Dest, KernelService, Plan, address_changes, deletable, graceful_check,
                                       member_changes, plan, termination_key)
from pykubelet.proxy.ipvs_state import DesiredState, RealServer, VirtualServer

VS = VirtualServer("10.96.0.10", 80, "TCP")
A, B, C = RealServer("10.244.1.5", 8080), RealServer("10.244.1.6", 8080), RealServer("10.244.1.7", 8080)


def desired(*servers: tuple[VirtualServer, tuple[RealServer, ...]]) -> DesiredState:
    return DesiredState(services={vs.key: vs for vs, _ in servers},
                        destinations={vs.key: frozenset(rss) for vs, rss in servers})


def kernel(*servers: tuple[VirtualServer, tuple[Dest, ...]]):
    return {vs.key: KernelService(vs, {d.server: d for d in dests}) for vs, dests in servers}


def test_a_new_service_is_added_with_its_real_servers():
    out = plan(desired((VS, (A, B))), {}, set(), first=False)
    assert out.add_services == [VS] and out.add_dests == [(VS, A), (VS, B)]
    assert not (out.update_services or out.delete_services or out.retire_dests)


def test_the_kernel_as_desired_needs_nothing():
    out = plan(desired((VS, (A, B))), kernel((VS, (Dest(A), Dest(B)))), set(), first=False)
    assert out == Plan() and not out


def test_a_changed_scheduler_or_affinity_is_changed_in_place_never_deleted():
    sticky = VirtualServer("10.96.0.10", 80, "TCP", "rr", 1, 10800)
    out = plan(desired((sticky, (A,))), kernel((VS, (Dest(A),))), set(), first=False)
    assert out.update_services == [sticky] and out.delete_services == [] and out.add_services == []


def test_a_removed_endpoint_is_retired_and_a_new_one_added():
    out = plan(desired((VS, (A, C))), kernel((VS, (Dest(A), Dest(B, active=3)))), set(), first=False)
    assert out.add_dests == [(VS, C)] and out.retire_dests == [(VS, B)] and out.delete_dests == []


def test_a_draining_endpoint_is_left_alone_and_one_that_comes_back_is_deleted_and_added_again():
    draining = {termination_key(VS, B)}
    out = plan(desired((VS, (A,))), kernel((VS, (Dest(A), Dest(B, weight=0, active=1)))), draining, first=False)
    assert out == Plan()
    back = plan(desired((VS, (A, B))), kernel((VS, (Dest(A), Dest(B, weight=0, active=1)))), draining, first=False)
    assert back.delete_dests == [(VS, B)] and back.add_dests == [(VS, B)]


def test_the_first_sync_puts_wanted_real_servers_back_to_weight_1():
    state = kernel((VS, (Dest(A, weight=0), Dest(B))))
    assert plan(desired((VS, (A, B))), state, set(), first=True).reweight_dests == [(VS, A)]
    assert plan(desired((VS, (A, B))), state, set(), first=False).reweight_dests == []


def test_the_first_sync_makes_a_real_server_left_direct_routed_masquerading_again():
    state = kernel((VS, (Dest(A, masquerading=False), Dest(B))))
    assert plan(desired((VS, (A, B))), state, set(), first=True).reweight_dests == [(VS, A)]
    assert plan(desired((VS, (A, B))), state, set(), first=False).reweight_dests == []


def test_virtual_servers_no_service_wants_are_deleted_but_not_excluded_or_ipv6_ones():
    gone, excluded = VirtualServer("10.96.0.99", 443, "TCP"), VirtualServer("10.250.0.1", 80, "TCP")
    v6 = VirtualServer("fd00::1", 80, "TCP")
    out = plan(desired(), kernel((gone, ()), (excluded, ()), (v6, ())), set(), first=False,
               exclude_cidrs=("10.250.0.0/16",))
    assert out.delete_services == [gone]


def test_udp_and_sctp_real_servers_go_at_once_tcp_ones_only_without_connections():
    udp = VirtualServer("10.96.0.10", 53, "UDP")
    assert deletable(udp, Dest(A, active=5)) and deletable(VirtualServer("10.96.0.10", 9, "SCTP"), Dest(A, inactive=1))
    assert deletable(VS, Dest(A)) and not deletable(VS, Dest(A, inactive=1)) and not deletable(VS, Dest(A, active=1))


def test_the_graceful_check_deletes_idle_ones_keeps_busy_ones_and_forgets_vanished_ones():
    other = VirtualServer("10.96.0.11", 80, "TCP")
    terminating = {termination_key(VS, A): (VS, A), termination_key(VS, B): (VS, B),
                   termination_key(VS, C): (VS, C), termination_key(other, A): (other, A)}
    state = kernel((VS, (Dest(A, weight=0), Dest(B, weight=0, active=2))))
    delete, drop = graceful_check(terminating, state)
    assert delete == [(VS, A)]
    assert sorted(drop) == sorted([termination_key(VS, A), termination_key(VS, C), termination_key(other, A)])


def test_ipset_members_and_kube_ipvs0_addresses_change_by_the_difference():
    add, delete = member_changes({"KUBE-CLUSTER-IP": {"10.96.0.1,tcp:443", "10.96.0.10,udp:53"}, "KUBE-IPVS-IPS": set()},
                                 {"KUBE-CLUSTER-IP": {"10.96.0.1,tcp:443", "10.96.0.9,tcp:80"},
                                  "KUBE-LOOP-BACK": {"10.244.0.5,tcp:80,10.244.0.5"}})
    assert add == {"KUBE-CLUSTER-IP": ["10.96.0.10,udp:53"]}
    assert delete == {"KUBE-CLUSTER-IP": ["10.96.0.9,tcp:80"], "KUBE-LOOP-BACK": ["10.244.0.5,tcp:80,10.244.0.5"]}
    assert address_changes({"10.96.0.1", "10.96.0.10"}, {"10.96.0.1", "10.96.0.9"}) == (["10.96.0.10"], ["10.96.0.9"])
