"""The iptables mode's rules: kube-proxy's chains, names and probabilities, as restore text."""

from __future__ import annotations

import pytest

from pykubelet.proxy import iptables, names
from pykubelet.proxy.iptables_rules import JUMPS, RuleSettings, nodeports_jump, port_rules
from pykubelet.proxy.model import ServiceName, ServicePortName
from tests.unit.proxy.helpers import ep, svc

SETTINGS = RuleSettings(cluster_cidrs=("10.0.0.0/24",))
SVC1 = "KUBE-SVC-XPGD46QRK7WJZT7O"  # kube-proxy's name for ns1/svc1:p80 (tcp)


def test_chain_names_are_kube_proxys():
    port = ServicePortName(ServiceName("ns1", "svc1"), "p80", "TCP")
    assert names.iptables_chain("KUBE-SVC-", port) == SVC1
    assert names.iptables_endpoint_chain(port, ep("10.180.0.1")) == "KUBE-SEP-SXIVWICOYRO3J4NJ"
    assert names.nft_chain("service-", port) == "service-ULMVA6XW-ns1/svc1/tcp/p80"
    port5 = ServicePortName(ServiceName("ns5", "svc5"), "p80", "TCP")
    assert names.nft_endpoint_base(port5, ep("10.180.0.3")) == "GTK6MW7G-ns5/svc5/tcp/p80__10.180.0.3/80"


def test_a_cluster_ip_with_one_endpoint_is_kube_proxys_rules():
    rules = port_rules(svc(endpoints=(ep("10.180.0.1"),)), SETTINGS)
    sep = "KUBE-SEP-SXIVWICOYRO3J4NJ"
    assert rules.nat_top == [f'-A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp '
                             f"-d 10.20.30.41 --dport 80 -j {SVC1}"]
    assert rules.chains == {
        SVC1: [f'-A {SVC1} -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 10.20.30.41 --dport 80 '
               "! -s 10.0.0.0/24 -j KUBE-MARK-MASQ",
               f'-A {SVC1} -m comment --comment "ns1/svc1:p80 -> 10.180.0.1:80" -j {sep}'],
        sep: [f"-A {sep} -m comment --comment ns1/svc1:p80 -s 10.180.0.1 -j KUBE-MARK-MASQ",
              f"-A {sep} -m comment --comment ns1/svc1:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.1:80"]}
    assert rules.filter_top == []


def test_endpoints_are_picked_with_kube_proxys_probabilities():
    port = svc(endpoints=tuple(ep(f"10.180.0.{i}") for i in range(1, 5)))
    lines = port_rules(port, SETTINGS).chains[SVC1][1:]
    chances = [line.split("--probability ")[1].split()[0] if "--probability" in line else None for line in lines]
    assert chances == ["0.2500000000", "0.3333333333", "0.5000000000", None]  # 1/(n-i); the last one always


def test_a_service_without_endpoints_is_rejected_in_the_filter_table():
    rules = port_rules(svc(node_port=30080), SETTINGS)
    assert rules.nat_top == [] and rules.chains == {}
    assert rules.filter_top == [
        '-A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 has no endpoints" -m tcp -p tcp -d 10.20.30.41 '
        "--dport 80 -j REJECT",
        '-A KUBE-EXTERNAL-SERVICES -m comment --comment "ns1/svc1:p80 has no endpoints" -m addrtype --dst-type LOCAL '
        "-m tcp -p tcp --dport 30080 -j REJECT"]


def test_a_node_port_goes_through_the_external_chain_which_masquerades():
    rules = port_rules(svc(node_port=30080, endpoints=(ep("10.180.0.1"),)), SETTINGS)
    ext = names.iptables_chain("KUBE-EXT-", svc().name)
    assert f"-A KUBE-NODEPORTS -m comment --comment ns1/svc1:p80 -m tcp -p tcp --dport 30080 -j {ext}" in rules.nat_top
    assert rules.chains[ext] == [
        f'-A {ext} -m comment --comment "masquerade traffic for ns1/svc1:p80 external destinations" -j KUBE-MARK-MASQ',
        f"-A {ext} -j {SVC1}"]


def test_external_policy_local_keeps_the_source_and_short_circuits_pods_and_the_node():
    port = svc(node_port=30080, external_local=True, endpoints=(ep("10.180.0.1", local=True), ep("10.180.0.2")))
    rules = port_rules(port, SETTINGS)
    ext, svl = names.iptables_chain("KUBE-EXT-", port.name), names.iptables_chain("KUBE-SVL-", port.name)
    assert [line.split(" -j ")[1] for line in rules.chains[ext]] == [SVC1, "KUBE-MARK-MASQ", SVC1, svl]
    assert "-s 10.0.0.0/24" in rules.chains[ext][0] and "--src-type LOCAL" in rules.chains[ext][1]
    assert len(rules.chains[svl]) == 1 and "10.180.0.1:80" in rules.chains[svl][0]  # only the local endpoint


def test_internal_policy_local_without_local_endpoints_drops():
    rules = port_rules(svc(internal_local=True, endpoints=(ep("10.180.0.2"),)), SETTINGS)
    assert rules.nat_top == [] and rules.no_local_internal
    assert rules.filter_top == ['-A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 has no local endpoints" '
                                "-m tcp -p tcp -d 10.20.30.41 --dport 80 -j DROP"]


def test_client_ip_affinity_checks_recent_first_and_records_in_the_endpoint_chain():
    port = svc(affinity_seconds=10800, endpoints=(ep("10.180.0.1"), ep("10.180.0.2")))
    rules = port_rules(port, SETTINGS)
    sep1 = names.iptables_endpoint_chain(port.name, ep("10.180.0.1"))
    svc_lines = rules.chains[SVC1]
    assert f"-m recent --name {sep1} --rcheck --seconds 10800 --reap -j {sep1}" in svc_lines[1]
    assert "--probability 0.5000000000" in svc_lines[3]
    assert f"-m recent --name {sep1} --set -m tcp -p tcp -j DNAT --to-destination 10.180.0.1:80" in rules.chains[sep1][1]


def test_masquerade_all_marks_every_cluster_ip_packet():
    rules = port_rules(svc(endpoints=(ep("10.180.0.1"),)), RuleSettings(masquerade_all=True))
    assert rules.chains[SVC1][0].endswith("--dport 80 -j KUBE-MARK-MASQ") and "! -s" not in rules.chains[SVC1][0]


def test_large_clusters_leave_out_the_per_endpoint_comments():
    rules = port_rules(svc(endpoints=(ep("10.180.0.1"),)), SETTINGS, large=True)
    assert all("comment" not in line for chain, lines in rules.chains.items() if chain != SVC1 for line in lines)
    assert "-> 10.180.0.1" not in " ".join(rules.chains[SVC1])


def test_nodeports_answer_on_local_addresses_or_the_chosen_ones():
    assert nodeports_jump(RuleSettings())[0].endswith("-m addrtype --dst-type LOCAL -j KUBE-NODEPORTS")
    assert "! -d 127.0.0.0/8" in nodeports_jump(RuleSettings(localhost_nodeports=False))[0]
    lines = nodeports_jump(RuleSettings(nodeport_ips=("10.250.0.31", "127.0.0.1"), localhost_nodeports=False))
    assert [line.split(" -d ")[1] for line in lines] == ["10.250.0.31 -j KUBE-NODEPORTS"]


SAVED = """# Generated by iptables-save
*nat
:PREROUTING ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-SVC-OLDOLDOLDOLDOLDO - [0:0]
:PYKUBELET-POSTROUTING - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A POSTROUTING -s 10.244.1.0/24 -j PYKUBELET-POSTROUTING
COMMIT
*filter
:INPUT ACCEPT [0:0]
COMMIT
"""


class Recorder:
    def __init__(self, saved: str = SAVED):
        self.saved, self.restored = saved, []

    async def __call__(self, *argv: str, stdin: str | None = None, timeout: float = 0) -> str:
        if argv[0] == "iptables-save":
            return self.saved
        assert argv[:4] == ("iptables-restore", "-w", "5", "--noflush"), argv
        self.restored.append(stdin)
        return ""


@pytest.fixture
def recorder(monkeypatch):
    rec = Recorder()
    monkeypatch.setattr(iptables, "run", rec)
    return rec


async def test_a_full_sync_is_one_restore_that_adds_missing_jumps_and_drops_stale_chains(recorder):
    backend = iptables.IptablesBackend(SETTINGS)
    port = svc(endpoints=(ep("10.180.0.1"),))
    await backend.sync({port.name: port}, None, False)
    (text,) = recorder.restored
    lines = text.splitlines()
    assert lines[0] == "*mangle" and "*filter" in lines and "*nat" in lines and lines.count("COMMIT") == 3
    assert ":KUBE-SVC-OLDOLDOLDOLDOLDO - [0:0]" in lines and "-X KUBE-SVC-OLDOLDOLDOLDOLDO" in lines
    assert "PYKUBELET-POSTROUTING" not in text  # not ours: --noflush leaves it alone
    inserted = [line for line in lines if line.startswith("-I ")]
    assert '-I PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES' not in inserted  # there
    assert len(inserted) == len(JUMPS) - 1 + 2  # every other jump, and the KUBE-FIREWALL guard's two
    assert lines.index("-A KUBE-SERVICES -m comment --comment \"kubernetes service nodeports; NOTE: this must be the "
                       "last rule in this chain\" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS") > \
        max(i for i, line in enumerate(lines) if line.startswith("-A KUBE-SERVICES") and "cluster IP" in line)


async def test_a_partial_sync_rewrites_only_the_changed_ports_chains(recorder):
    backend = iptables.IptablesBackend(SETTINGS)
    a = svc("a", cluster_ip="10.96.0.1", endpoints=(ep("10.180.0.1"),))
    b = svc("b", cluster_ip="10.96.0.2", endpoints=(ep("10.180.0.2"),))
    await backend.sync({a.name: a, b.name: b}, None, False)
    b2 = svc("b", cluster_ip="10.96.0.2", endpoints=(ep("10.180.0.3"),))
    await backend.sync({a.name: a, b2.name: b2}, {b.name}, False)
    text = recorder.restored[-1]
    assert len(recorder.restored) == 2
    chain_a = names.iptables_chain("KUBE-SVC-", a.name)
    assert f":{chain_a} " not in text and f"-A {chain_a}" not in text  # untouched
    assert f"-j {chain_a}" in text  # but still dispatched to from the rewritten KUBE-SERVICES
    old_sep = names.iptables_endpoint_chain(b.name, ep("10.180.0.2"))
    assert f"-X {old_sep}" in text and "10.180.0.3:80" in text
    assert "*mangle" not in text and "-I " not in text  # no canary or jumps outside full syncs


async def test_cleanup_removes_our_chains_and_jumps_only(monkeypatch):
    rec = Recorder(SAVED.replace("COMMIT\n*filter", "-A KUBE-SERVICES -j KUBE-SVC-OLDOLDOLDOLDOLDO\nCOMMIT\n*filter"))
    monkeypatch.setattr(iptables, "run", rec)
    assert await iptables.cleanup()
    (text,) = rec.restored
    assert '-D PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES' in text
    assert "-X KUBE-SERVICES" in text and "-X KUBE-SVC-OLDOLDOLDOLDOLDO" in text
    assert "PYKUBELET" not in text
