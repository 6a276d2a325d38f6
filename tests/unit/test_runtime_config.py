"""Which CNI config containerd uses, and when another network's config has taken a node over from
the agent; what the agent does then, and doctor's verdicts (network/runtime_config.py,
network/manager.py, diagnose/doctor_network.py)."""

from __future__ import annotations

import json
import os

import pytest

from pykubelet.config import NetworkSettings, Settings
from pykubelet.diagnose import doctor_network
from pykubelet.diagnose.checks import FAIL, OK, Node
from pykubelet.kube.events import NORMAL, WARNING
from pykubelet.network.assets import CONFLIST_NAME
from pykubelet.network.manager import NetworkManager
from pykubelet.cni.config import config_files
from pykubelet.network.runtime_config import RuntimeConfig, conflict, read_runtime_config


def test_containerd_uses_the_first_config_file_by_name_and_ignores_other_files():
    names = ["10-pykubelet.conflist", "README", "99-loopback.conf", "10-flannel.conflist", "00-x.json", "x.conf.bak",
             "20-a.conflist~"]
    assert config_files(names) == ("00-x.json", "10-flannel.conflist", "10-pykubelet.conflist", "99-loopback.conf")


def test_the_order_is_by_bytes_as_containerd_sorts():
    # Upper case and "." before digits and lower case; a dot file is a config file too.
    assert config_files(["a.conf", "B.conf", "1.conf", ".hidden.conflist"]) == (
        ".hidden.conflist", "1.conf", "B.conf", "a.conf")
    undecodable = os.fsdecode(b"\xff.conf")  # not UTF-8: sorts after every ASCII name, as its bytes do
    assert config_files([undecodable, "z.conf"]) == ("z.conf", undecodable)


def test_the_file_in_charge_is_the_first_and_is_the_agents_only_by_its_name(tmp_path):
    (tmp_path / CONFLIST_NAME).write_text("{}")
    (tmp_path / "10-flannel.conflist").write_text("{}")
    (tmp_path / "00-dir.conflist").mkdir()  # containerd skips directories
    config = read_runtime_config(str(tmp_path))
    assert config.in_charge == "10-flannel.conflist" and config.path == str(tmp_path / "10-flannel.conflist")
    assert config.unused == (CONFLIST_NAME,) and not config.agents
    (tmp_path / "10-flannel.conflist").unlink()
    assert read_runtime_config(str(tmp_path)).agents


def test_a_missing_conf_dir_has_no_config(tmp_path):
    config = read_runtime_config(str(tmp_path / "none"))
    assert config.files == () and config.in_charge == "" and config.path == ""


FLANNEL = RuntimeConfig("/etc/cni/net.d", ("10-flannel.conflist", CONFLIST_NAME))
OURS = RuntimeConfig("/etc/cni/net.d", (CONFLIST_NAME, "99-later.conf"))


def test_a_foreign_config_in_charge_of_an_agent_mode_node_is_a_conflict_naming_the_file_and_the_fix():
    found = conflict(FLANNEL, NetworkSettings(mode="agent"))
    assert found is not None and found.path == "/etc/cni/net.d/10-flannel.conflist"
    assert str(found).startswith("another network's CNI config /etc/cni/net.d/10-flannel.conflist is the one "
                                 f"containerd uses (it sorts before the agent's {CONFLIST_NAME})")
    assert "--network-mode runtime" in found.fix and "remove /etc/cni/net.d/10-flannel.conflist" in found.fix
    # With the agent's file absent, the foreign one is in charge just the same.
    assert conflict(RuntimeConfig("/d", ("10-flannel.conflist",)), NetworkSettings(mode="agent")) is not None


def test_the_agent_writing_the_runtimes_own_config_conflicts_too_and_is_told_the_other_flag():
    found = conflict(FLANNEL, NetworkSettings(mode="runtime", write_runtime_config=True))
    assert found is not None and "without --cni-write-config" in found.fix


@pytest.mark.parametrize("config, network", [
    (OURS, NetworkSettings(mode="agent")),  # the agent's config in charge
    (RuntimeConfig("/d", ()), NetworkSettings(mode="agent")),  # nothing written yet
    (FLANNEL, NetworkSettings(mode="runtime")),  # a DaemonSet's network: the healthy runtime-mode node
])
def test_no_conflict(config, network):
    assert conflict(config, network) is None


class RecordingEvents:
    def __init__(self):
        self.events = []

    def record(self, ref, kind, reason, message):
        self.events.append((ref["kind"], ref["name"], kind, reason, message))


class RecordingHost:
    def __init__(self):
        self.calls = []

    def forget(self):
        self.calls.append("forget")

    async def sync_masquerade(self, pod_cidr, cidrs):
        self.calls.append("masquerade")

    async def sync_routes(self, routes):
        self.calls.append("routes")


async def test_the_agent_leaves_the_host_network_alone_while_a_foreign_config_is_in_charge(tmp_path):
    conf_dir = tmp_path / "net.d"
    conf_dir.mkdir()
    (conf_dir / CONFLIST_NAME).write_text("{}")
    events = RecordingEvents()
    manager = NetworkManager(NetworkSettings(cni_conf_dir=str(conf_dir)), None, str(tmp_path), "n1", None,
                             recorder=events)
    manager.host = host = RecordingHost()
    manager.pod_cidr = "10.244.1.0/24"
    await manager._check_runtime_config()
    assert manager.conflict is None and events.events == []

    (conf_dir / "10-flannel.conflist").write_text("{}")
    await manager._check_runtime_config()
    await manager._check_runtime_config()  # still there: said once
    assert not manager.ready.is_set() and f"{conf_dir}/10-flannel.conflist" in manager.problem
    [(kind, name, event_type, reason, message)] = events.events
    assert (kind, name, event_type, reason) == ("Node", "n1", WARNING, "CNIConfigConflict")
    assert "--network-mode runtime" in message
    await manager._sync_host_network()
    assert host.calls == []  # neither our routes nor anyone else's are touched

    (conf_dir / "10-flannel.conflist").unlink()
    await manager._check_runtime_config()
    assert events.events[-1][2:4] == (NORMAL, "CNIConfigRestored")
    assert host.calls == ["forget"] and manager._nodes_changed.is_set()  # the run loop resyncs, then is ready
    await manager._sync_host_network()
    manager._report()
    assert host.calls == ["forget", "masquerade", "routes"]
    assert manager.ready.is_set() and manager.problem == ""


def doctor_node(tmp_path, mode, **network):
    """A node for doctor's network checks, with a conf dir holding the agent's config."""
    conf, bins = tmp_path / "net.d", tmp_path / "bin"
    conf.mkdir()
    bins.mkdir()
    for name in ("loopback", "bridge", "portmap", "host-local", "flannel", "pykubelet-cni"):
        (bins / name).write_text("#!/bin/sh\n")
        (bins / name).chmod(0o755)
    (conf / CONFLIST_NAME).write_text(json.dumps(
        {"cniVersion": "1.0.0", "name": "pykubelet", "plugins": [{"type": "pykubelet-cni"}]}))
    node = Node(Settings(), "test", agent={})
    node.settings.network = NetworkSettings(mode=mode, cni_conf_dir=str(conf), cni_bin_dirs=[str(bins)], **network)
    node.runtime_info = {"config": {"cni": {"confDir": str(conf), "binDir": str(bins)}}}
    return node, conf


def write_flannel(conf):
    (conf / "10-flannel.conflist").write_text(json.dumps(
        {"cniVersion": "0.3.1", "name": "cbr0", "plugins": [{"type": "flannel"}, {"type": "portmap"}]}))


def test_doctor_fails_an_agent_mode_node_whose_runtime_uses_a_daemonsets_config_naming_file_and_fix(tmp_path):
    node, conf = doctor_node(tmp_path, "agent")
    assert not doctor_network._cni_config(node).foreign
    assert [c.status for c in node.checks] == [OK, OK]  # the healthy node: the agent's config, its plugins

    write_flannel(conf)
    node.checks.clear()
    seen = doctor_network._cni_config(node)
    assert seen.foreign
    (check,) = node.checks
    assert check.status == FAIL
    assert check.title == (f"{conf}/10-flannel.conflist is the CNI config containerd uses, "
                           f"not the agent's {CONFLIST_NAME}")
    assert check.evidence[0] == f"containerd uses only the first file by name: 10-flannel.conflist, {CONFLIST_NAME}"
    assert check.evidence[1].startswith("10-flannel.conflist: network 'cbr0', plugins flannel → portmap: new pods")
    assert check.evidence[-1].startswith("fix: if a CNI DaemonSet owns this node's network, run the agent with "
                                         "--network-mode runtime")
    assert check.more == f"ls -l {conf}"


def test_doctor_says_an_invalid_foreign_config_leaves_new_pods_without_a_network(tmp_path):
    node, conf = doctor_node(tmp_path, "agent")
    (conf / "05-broken.conf").write_text("{")
    doctor_network._cni_config(node)
    (check,) = node.checks
    assert check.status == FAIL and check.title.startswith(f"{conf}/05-broken.conf is the CNI config containerd uses")
    assert check.evidence[1].startswith("it is not valid (") and "no network at all" in check.evidence[1]


def test_doctor_calls_a_daemonsets_config_in_charge_of_a_runtime_mode_node_ok_and_names_it(tmp_path):
    node, conf = doctor_node(tmp_path, "runtime")
    write_flannel(conf)
    seen = doctor_network._cni_config(node)
    assert not seen.foreign and seen.types == ["flannel", "portmap"]
    assert [(c.status, c.title) for c in node.checks] == [
        (OK, f"CNI config {conf}/10-flannel.conflist: network 'cbr0', plugins flannel → portmap"),
        (OK, f"CNI plugins present in {tmp_path / 'bin'}")]
    assert node.checks[0].evidence == [f"other files (not used): {CONFLIST_NAME}"]


def test_doctor_fails_the_same_conflict_when_the_agent_writes_the_runtimes_config(tmp_path):
    node, conf = doctor_node(tmp_path, "runtime", write_runtime_config=True)
    write_flannel(conf)
    assert doctor_network._cni_config(node).foreign
    assert node.checks[0].status == FAIL and "without --cni-write-config" in node.checks[0].evidence[-1]
