"""The parts of the IPVS mode this machine's kernel can run (it has ipset and iptables but no
ip_vs and no dummy links), each in a throwaway network namespace (`unshare --net`, gone with
the process): our ipsets created and filled through netlink and read back as written, a
partial update, the iptables batch accepted by the kernel with its set matches, and the
cleanup's chain and set removal leaving nothing behind. The virtual servers and kube-ipvs0
are tested in the VMs (tests/vm/test_vm_ipvs.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.proxy.helpers import ep, svc

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("iptables-save"),
                                reason="needs root, unshare and iptables")


async def in_netns() -> dict:
    """Run inside the new namespace; what it saw, as JSON-able data."""
    from pykubelet.proxy import ipvs_ipsets, iptables, ipvs_rules
    from pykubelet.proxy.ipvs_state import IpvsSettings, desired_state

    settings = IpvsSettings(cluster_cidrs=("10.244.0.0/16",), node_ip="192.168.1.10")
    ports = [svc(endpoints=(ep("10.244.0.5", local=True),), node_port=30080, load_balancer_ips=("198.51.100.9",),
                 source_ranges=("192.168.0.0/16", "192.0.2.1/32"), external_local=True, external_ips=("203.0.113.5",)),
             svc(name="dns", endpoints=(ep("10.244.0.6", local=True, port=53),), protocol="UDP", port=53,
                 node_port=30053),
             svc(name="sctp", endpoints=(ep("10.244.0.7"),), protocol="SCTP", port=99, node_port=30099)]
    want = desired_state({p.name: p for p in ports}, settings, ["192.168.1.10"])
    out: dict = {"want": {k: sorted(v) for k, v in want.members.items()}}
    have = await ipvs_ipsets.sync(want.members, None)
    async with ipvs_ipsets.AsyncIPSet() as ipset:
        out["full"] = {k: sorted(v) for k, v in (await ipvs_ipsets._members(ipset)).items() if v}
    smaller = desired_state({p.name: p for p in ports[1:]}, settings, ["192.168.1.10"])
    await ipvs_ipsets.sync(smaller.members, have)
    async with ipvs_ipsets.AsyncIPSet() as ipset:
        out["partial"] = {k: sorted(v) for k, v in (await ipvs_ipsets._members(ipset)).items() if v}
    out["smaller"] = {k: sorted(v) for k, v in smaller.members.items()}
    await ipvs_ipsets.sync(want.members, None)  # a full sync: the sets exist already, their members are read
    async with ipvs_ipsets.AsyncIPSet() as ipset:
        out["full_again"] = {k: sorted(v) for k, v in (await ipvs_ipsets._members(ipset)).items() if v}
    restore = subprocess.run([*iptables.RESTORE], input=ipvs_rules.restore_text(want, settings, list(ipvs_rules.JUMPS)),
                             text=True, capture_output=True)
    out["restore"] = (restore.returncode, restore.stderr)
    out["saved"] = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
    out["chains_removed"] = await iptables.cleanup(ipvs_rules.CHAINS)
    out["destroyed"] = sorted(await ipvs_ipsets.destroy())
    out["after"] = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
    async with ipvs_ipsets.AsyncIPSet() as ipset:
        out["sets_after"] = [m.get_attr("IPSET_ATTR_SETNAME") async for m in await ipset.list()]
    return out


@pytest.fixture(scope="module")
def seen() -> dict:
    code = "import asyncio, json; from tests.unit.proxy.test_ipvs_netns import in_netns; " \
           "print(json.dumps(asyncio.run(in_netns())))"
    result = subprocess.run(["unshare", "--net", sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if result.returncode != 0 and "Operation not permitted" in result.stderr:
        pytest.skip("cannot make a network namespace here")
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_every_ipset_kind_is_written_through_netlink_and_reads_back_as_written(seen):
    want = {k: v for k, v in seen["want"].items() if v}
    assert seen["full"] == want
    assert {"KUBE-LOOP-BACK", "KUBE-LOAD-BALANCER-SOURCE-CIDR", "KUBE-LOAD-BALANCER-SOURCE-IP", "KUBE-NODE-PORT-TCP",
            "KUBE-NODE-PORT-UDP", "KUBE-NODE-PORT-SCTP-HASH", "KUBE-IPVS-IPS"} <= set(want)


def test_a_partial_update_leaves_the_sets_holding_exactly_the_new_members_and_a_full_one_restores(seen):
    assert seen["partial"] == {k: v for k, v in seen["smaller"].items() if v}
    assert seen["full_again"] == seen["full"]


def test_the_kernel_takes_the_iptables_batch_with_its_set_matches_and_jumps(seen):
    assert seen["restore"][0] == 0, seen["restore"][1]
    saved = seen["saved"]
    assert '-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES' in saved
    assert ('-A KUBE-SERVICES ! -s 10.244.0.0/16 -m comment --comment "Kubernetes service cluster ip + port for '
            'masquerade purpose" -m set --match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ') in saved
    assert "-A KUBE-NODE-PORT -p udp" in saved and "--match-set KUBE-NODE-PORT-UDP dst -j KUBE-MARK-MASQ" in saved


def test_cleanup_removes_every_chain_jump_and_set(seen):
    assert seen["chains_removed"] and "KUBE-" not in seen["after"]
    assert len(seen["destroyed"]) == 17 and seen["sets_after"] == []
