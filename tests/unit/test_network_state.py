"""What the agent remembers about its pod network, and how it cleans up after a crash."""

from __future__ import annotations

import json
import os
import time

import pytest

from pykubelet.cni.client import Attachment
from pykubelet.cni.config import parse_conflist
from pykubelet.cni.result import parse_result
from pykubelet.network import assets
from pykubelet.network.attachments import AttachmentRecords
from pykubelet.network.hostnet import (masquerade_chain, masquerade_rules, netns_path, node_route,
                                       routes_to_other_nodes)
from pykubelet.network.pod_network import AgentPodNetwork

RESULT = {"cniVersion": "1.0.0", "interfaces": [{"name": "eth0", "sandbox": "/var/run/netns/x"}],
          "ips": [{"address": "10.244.1.5/24", "gateway": "10.244.1.1", "interface": 0}]}


def pod_network_conflist(tmp_path) -> dict:
    return assets.render("pod-network.conflist", bridge="pkl0", pod_cidr="10.244.1.0/24",
                         ipam_dir=str(tmp_path / "ipam"))


def test_the_pod_network_template_is_filled_with_the_nodes_values(tmp_path):
    conf = pod_network_conflist(tmp_path)
    net = parse_conflist(conf, "cni/pod-network.conflist")
    bridge, portmap = net.plugins
    assert (bridge["type"], bridge["bridge"], bridge["ipam"]["subnet"]) == ("bridge", "pkl0", "10.244.1.0/24")
    assert bridge["ipam"]["dataDir"] == str(tmp_path / "ipam")
    assert bridge["ipMasq"] is False  # the agent masquerades only traffic leaving the cluster
    assert bridge["forceAddress"] is True  # the bridge's gateway address follows the node's podCIDR
    assert portmap["capabilities"] == {"portMappings": True}
    assert net.cni_version == "1.0.0"  # Debian's plugins speak up to 1.0.0
    assert net.disable_check  # portmap 1.1.1's CHECK fails on IPv4-only pods


def test_the_containerd_conflist_names_the_shim_and_its_socket():
    conf = assets.render("containerd-agent-mode.conflist", socket="/run/x/cni.sock")
    (shim,) = conf["plugins"]
    assert shim == {"type": "pykubelet-cni", "socket": "/run/x/cni.sock", "capabilities": {"portMappings": True}}


def test_conflists_are_rewritten_only_when_they_change(tmp_path):
    assert assets.write_conflist(str(tmp_path), {"a": 1})
    assert not assets.write_conflist(str(tmp_path), {"a": 1})
    assert assets.write_conflist(str(tmp_path), {"a": 2})
    assert json.loads((tmp_path / assets.CONFLIST_NAME).read_text()) == {"a": 2}
    assert [p.name for p in tmp_path.iterdir()] == [assets.CONFLIST_NAME]


def test_records_round_trip_and_refuse_path_tricks(tmp_path):
    records = AttachmentRecords(str(tmp_path / "att"))
    assert records.load("abc") is None and records.ids() == set()
    records.save("abc", {"result": RESULT})
    assert records.load("abc") == {"result": RESULT} and records.ids() == {"abc"}
    records.remove("abc")
    records.remove("abc")
    assert records.ids() == set()
    with pytest.raises(ValueError):
        records.save("../etc", {})


class RecordingCNI:
    def __init__(self):
        self.deleted = []
        self.kept = None
        self.deleted_attachments = []

    async def gc(self, net, valid):
        self.kept = [att.container_id for att in valid]

    async def delete(self, net, att, prev_result=None):
        self.deleted.append((att.container_id, att.netns, prev_result))
        self.deleted_attachments.append(att)

    async def add(self, net, att):
        return parse_result(RESULT, "1.0.0")


async def test_a_restarted_agent_releases_what_pods_that_are_gone_held(tmp_path):
    conf = pod_network_conflist(tmp_path)
    records = AttachmentRecords(str(tmp_path / "att"))
    cni = RecordingCNI()
    network = AgentPodNetwork(cni, parse_conflist(conf), records, str(tmp_path / "ipam"))
    # alive: recorded and reserved; gone: recorded (its DEL never reached us); half: reserved by
    # an ADD the agent died in, never recorded.
    for cid in ("alive", "gone"):
        records.save(cid, {"ifname": "eth0", "args": {"K8S_POD_NAME": cid}, "result": RESULT})
    ipam = tmp_path / "ipam" / "pykubelet"
    ipam.mkdir(parents=True)
    (ipam / "10.244.1.5").write_text("alive\r\neth0")
    (ipam / "10.244.1.6").write_text("gone\r\neth0")
    (ipam / "10.244.1.7").write_text("half\r\neth0")
    (ipam / "last_reserved_ip.0").write_text("10.244.1.7")
    (ipam / "lock").write_text("")

    released = await network.release_leaks({"alive", "some-other-sandbox"})
    await network.collect_garbage({"alive", "some-other-sandbox"})

    assert released == ["gone", "half"]
    assert [(cid, netns) for cid, netns, _ in cni.deleted] == [("gone", ""), ("half", "")]
    assert cni.deleted[0][2] == parse_result(RESULT, "1.0.0")  # DEL gets the result ADD returned
    assert cni.deleted[1][2] is None
    assert records.ids() == {"alive"}
    assert cni.kept == ["alive"]  # a CNI 1.1 GC is told what stays


async def test_a_second_del_of_a_detached_sandbox_runs_no_plugin(tmp_path):
    records = AttachmentRecords(str(tmp_path / "att"))
    cni = RecordingCNI()
    network = AgentPodNetwork(cni, parse_conflist(pod_network_conflist(tmp_path)), records, str(tmp_path / "ipam"))
    records.save("abc", {"ifname": "eth0", "result": RESULT})
    attachment = Attachment(container_id="abc", netns="/var/run/netns/cni-1")
    await network.delete(attachment)
    await network.delete(Attachment(container_id="abc", netns=""))  # containerd's second DEL
    assert [cid for cid, _, _ in cni.deleted] == ["abc"]


async def test_a_released_leftover_is_told_its_port_mappings_so_portmap_removes_its_rules(tmp_path, monkeypatch):
    import pykubelet.network.pod_network as pod_network

    async def address_is_there(att, result):
        return None
    monkeypatch.setattr(pod_network, "verify_attachment", address_is_there)
    records = AttachmentRecords(str(tmp_path / "att"))
    cni = RecordingCNI()
    network = AgentPodNetwork(cni, parse_conflist(pod_network_conflist(tmp_path)), records, str(tmp_path / "ipam"))
    mappings = [{"hostPort": 18080, "containerPort": 80, "protocol": "tcp", "hostIP": ""}]
    await network.add(Attachment(container_id="web", netns="/var/run/netns/cni-1",
                                 capability_args={"portMappings": mappings}))

    await network.release_leaks(set())  # the pod was removed while the agent was down

    (released,) = cni.deleted_attachments
    assert released.container_id == "web"
    assert released.capability_args == {"portMappings": mappings}


@pytest.mark.parametrize("node, route", [
    ({"spec": {"podCIDR": "10.244.3.0/24"}, "status": {"addresses": [{"type": "Hostname", "address": "n"},
                                                                      {"type": "InternalIP", "address": "10.0.0.3"}]}},
     ("10.244.3.0/24", "10.0.0.3")),
    ({"spec": {"podCIDRs": ["fd00::/64", "10.244.4.0/24"]},
      "status": {"addresses": [{"type": "InternalIP", "address": "fd00::1"},
                               {"type": "InternalIP", "address": "10.0.0.4"}]}},
     ("10.244.4.0/24", "10.0.0.4")),
    ({"spec": {}, "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.5"}]}}, None),
    ({"spec": {"podCIDR": "10.244.6.0/24"}, "status": {}}, None),
    ({"spec": {"podCIDR": "garbage"}, "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.7"}]}}, None),
])
def test_a_node_route_needs_an_ipv4_pod_cidr_and_internal_ip(node, route):
    assert node_route(node) == route


def test_netns_names_are_found_where_ip_netns_keeps_them():
    assert netns_path("node1") == "/var/run/netns/node1"
    assert netns_path("/proc/42/ns/net") == "/proc/42/ns/net"
    assert netns_path("") == ""


def _node(name: str, cidr: str, ip: str) -> dict:
    return {"metadata": {"name": name}, "spec": {"podCIDR": cidr},
            "status": {"addresses": [{"type": "InternalIP", "address": ip}]}}


def test_routes_go_to_every_other_node_but_not_to_ourselves():
    me = _node("n1", "10.244.1.0/24", "10.0.0.1")
    nodes = [me, _node("n2", "10.244.2.0/24", "10.0.0.2"), _node("alias", "10.244.3.0/24", "10.0.0.1"),
             {"metadata": {"name": "new"}, "spec": {}, "status": {}}]
    routes, cidrs = routes_to_other_nodes("n1", me, nodes)
    assert routes == {"10.244.2.0/24": "10.0.0.2"}
    assert cidrs == {"10.244.1.0/24", "10.244.2.0/24", "10.244.3.0/24"}  # all stay unmasqueraded


def test_each_bridge_has_its_own_masquerade_chain_so_two_nodes_can_share_a_host_network():
    assert masquerade_chain("pkl0") == "PYKUBELET-POSTROUTING"  # the default node keeps its chain
    other = masquerade_chain("pklcf0")
    assert other != "PYKUBELET-POSTROUTING" and len(other) <= 28  # iptables' limit on chain names
    assert len(masquerade_chain("a" * 15)) <= 28  # the longest interface name


def test_the_masquerade_chain_returns_cluster_traffic_and_masquerades_the_rest():
    rules = masquerade_rules("PKL-MASQ-x", ["10.245.1.0/24", "10.245.0.0/24"]).splitlines()
    assert rules == ["*nat", ":PKL-MASQ-x - [0:0]",
                     "-A PKL-MASQ-x -d 10.245.0.0/24 -j RETURN", "-A PKL-MASQ-x -d 10.245.1.0/24 -j RETURN",
                     "-A PKL-MASQ-x -d 224.0.0.0/4 -j RETURN", "-A PKL-MASQ-x -j MASQUERADE", "COMMIT"]


async def test_a_running_agent_spares_what_was_just_written_and_what_is_in_flight(tmp_path):
    records = AttachmentRecords(str(tmp_path / "att"))
    cni = RecordingCNI()
    network = AgentPodNetwork(cni, parse_conflist(pod_network_conflist(tmp_path)), records, str(tmp_path / "ipam"))
    for cid in ("old", "fresh", "busy"):
        records.save(cid, {"ifname": "eth0", "result": RESULT})
    long_ago = time.time() - 120
    for cid in ("old", "busy"):
        os.utime(records._path(cid), (long_ago, long_ago))
    ipam = tmp_path / "ipam" / "pykubelet"
    ipam.mkdir(parents=True)
    (ipam / "10.244.1.9").write_text("reserved-long-ago\r\neth0")
    os.utime(ipam / "10.244.1.9", (long_ago, long_ago))

    async with network._locks["busy"]:  # an ADD or DEL of it is under way
        released = await network.release_leaks(set(), quiet_seconds=30)

    # "fresh" may be a sandbox whose RunPodSandbox has not returned yet: not listed, not a leak.
    assert released == ["old", "reserved-long-ago"]
    assert records.ids() == {"fresh", "busy"}
    assert cni.kept is None  # no GC while ADDs may be under way
