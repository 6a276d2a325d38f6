"""The nftables mode's rules: one table, verdict maps, numgen, one transaction per sync."""

from __future__ import annotations

import pytest

from pykubelet.proxy import nftables
from pykubelet.proxy.nftables_rules import RuleSettings, fixed_table, port_rules
from tests.unit.proxy.helpers import ep, svc

SETTINGS = RuleSettings(cluster_cidrs=("10.0.0.0/24",))
SVC1 = "service-ULMVA6XW-ns1/svc1/tcp/p80"


def test_a_cluster_ip_is_a_map_element_and_a_numgen_dnat():
    rules = port_rules(svc(endpoints=(ep("10.180.0.1"), ep("10.180.0.2"))), SETTINGS)
    assert ("service-ips", "10.20.30.41 . tcp . 80", f"goto {SVC1}") in rules.elements
    assert ("cluster-ips", "10.20.30.41", "") in rules.elements
    assert rules.chains == {SVC1: ["meta l4proto tcp dnat ip addr . port to numgen random mod 2 map "
                                   "{ 0 : 10.180.0.1 . 80, 1 : 10.180.0.2 . 80 }"]}


def test_no_endpoints_goes_to_the_reject_chain_and_node_ports_too():
    rules = port_rules(svc(node_port=30080), SETTINGS)
    assert rules.chains == {}
    assert ("no-endpoint-services", '10.20.30.41 . tcp . 80 comment "ns1/svc1:p80"', "goto reject-chain") in rules.elements
    assert ("no-endpoint-nodeports", 'tcp . 30080 comment "ns1/svc1:p80"', "goto reject-chain") in rules.elements


def test_affinity_remembers_the_client_in_a_timed_set_per_endpoint():
    port = svc("svc5", "ns5", affinity_seconds=10800, endpoints=(ep("10.180.0.3"),))
    rules = port_rules(port, SETTINGS)
    base = "GTK6MW7G-ns5/svc5/tcp/p80__10.180.0.3/80"
    chain = next(c for c in rules.chains if c.startswith("service-"))
    assert rules.chains[chain][0] == f"ip saddr @affinity-{base} goto endpoint-{base}"
    assert rules.chains[chain][1] == f"numgen random mod 1 vmap {{ 0 : goto endpoint-{base} }}"
    assert rules.chains[f"endpoint-{base}"] == [f"update @affinity-{base} {{ ip saddr }}",
                                                "meta l4proto tcp dnat to 10.180.0.3:80"]
    assert rules.affinity_sets == {f"affinity-{base}": 10800}


def test_local_endpoints_are_hairpin_connections():
    rules = port_rules(svc(endpoints=(ep("10.180.0.1", local=True), ep("10.180.0.2"))), SETTINGS)
    assert [e for e in rules.elements if e[0] == "hairpin-connections"] == [
        ("hairpin-connections", "10.180.0.1 . 10.180.0.1 . tcp . 80", "")]


def test_the_fixed_table_has_kube_proxys_base_chains_and_masquerading():
    text = "\n".join(fixed_table(SETTINGS, first=True))
    assert 'add table ip kube-proxy { comment "rules for kube-proxy" ; }' in text
    assert "add chain ip kube-proxy nat-prerouting { type nat hook prerouting priority -100 ; }" in text
    assert "add chain ip kube-proxy nat-prerouting\ndelete chain ip kube-proxy nat-prerouting" in text  # re-created
    assert "mark and 0x004000 != 0 mark set mark xor 0x004000 masquerade fully-random" in text
    assert "ip daddr @cluster-ips ip saddr != 10.0.0.0/24 mark set mark or 0x004000" in text
    assert "fib daddr type local ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @service-nodeports" in text
    assert "delete chain" not in "\n".join(fixed_table(SETTINGS, first=False))


class Recorder:
    def __init__(self):
        self.scripts: list[str] = []

    async def __call__(self, *argv: str, stdin: str | None = None, timeout: float = 0) -> str:
        if argv[:3] == ("nft", "-j", "-t"):  # list chains / sets
            kind = argv[4][:-1]
            return ('{"nftables": [{"%s": {"table": "kube-proxy", "name": "service-OLD-ns/gone/tcp/p"}}]}' % kind
                    if kind == "chain" else '{"nftables": []}')
        assert argv == ("nft", "-f", "-"), argv
        self.scripts.append(stdin or "")
        return ""


@pytest.fixture
def recorder(monkeypatch):
    rec = Recorder()
    monkeypatch.setattr(nftables, "run", rec)
    return rec


async def test_a_full_sync_refills_the_maps_and_deletes_stale_chains_in_one_transaction(recorder):
    backend = nftables.NftablesBackend(SETTINGS)
    port = svc(endpoints=(ep("10.180.0.1"),))
    await backend.sync({port.name: port}, None, False)
    (script,) = recorder.scripts
    lines = script.splitlines()
    assert "flush map ip kube-proxy service-ips" in lines
    add = f"add element ip kube-proxy service-ips {{ 10.20.30.41 . tcp . 80 : goto {SVC1} }}"
    assert lines.index(f"add chain ip kube-proxy {SVC1}") < lines.index(add)  # the chain before what points to it
    assert lines[-2:] == ["flush chain ip kube-proxy service-OLD-ns/gone/tcp/p",
                          "delete chain ip kube-proxy service-OLD-ns/gone/tcp/p"]


async def test_a_partial_sync_writes_element_changes_and_changed_chains_only(recorder):
    backend = nftables.NftablesBackend(SETTINGS)
    a = svc("a", cluster_ip="10.96.0.1", endpoints=(ep("10.180.0.1"),))
    b = svc("b", cluster_ip="10.96.0.2", endpoints=(ep("10.180.0.2"),))
    await backend.sync({a.name: a, b.name: b}, None, False)
    await backend.sync({a.name: a}, {b.name}, False)
    script = recorder.scripts[-1]
    assert "add table" not in script and "svc1" not in script and "/a/" not in script
    assert "delete element ip kube-proxy service-ips { 10.96.0.2 . tcp . 80 }" in script
    assert "delete element ip kube-proxy cluster-ips { 10.96.0.2 }" in script
    assert script.index("delete element ip kube-proxy service-ips") < script.index("delete chain")
    assert "/b/tcp/p80" in script.split("delete chain", 1)[1]


async def test_cleanup_deletes_the_table(monkeypatch):
    calls = []

    async def run(*argv, stdin=None, timeout=0):
        calls.append((argv, stdin))
        return ""
    monkeypatch.setattr(nftables, "run", run)
    assert await nftables.cleanup()
    assert calls[-1] == (("nft", "-f", "-"), "add table ip kube-proxy\ndelete table ip kube-proxy\n")
