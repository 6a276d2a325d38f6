"""doctor's network and apiserver judgements on made-up evidence: a CNI conf dir the agent does not
share with containerd, a config that does not parse, plugins missing; an apiserver that refuses
the node's credentials, a Lease gone stale."""

from __future__ import annotations

import json
import time

from pykubelet.config import Settings
from pykubelet.diagnose import doctor_api, doctor_network
from pykubelet.diagnose.checks import FAIL, OK, WARN, Node


def network_node(tmp_path, conf_dir, bin_dir, mode="runtime") -> Node:
    node = Node(Settings(), "test", agent={})
    node.settings.network.mode = mode
    node.settings.network.cni_conf_dir = str(conf_dir)
    node.settings.network.cni_bin_dirs = [str(bin_dir)]
    node.runtime_info = {"config": {"cni": {"confDir": str(conf_dir), "binDir": str(bin_dir)}}}
    return node


def plugin(bin_dir, *names):
    bin_dir.mkdir(exist_ok=True)
    for name in names:
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)


def conflist(*types):
    return json.dumps({"cniVersion": "1.0.0", "name": "net", "plugins": [{"type": t} for t in types]})


def test_a_config_whose_plugins_are_missing_names_them_and_where_it_looked(tmp_path):
    conf, bins = tmp_path / "net.d", tmp_path / "bin"
    conf.mkdir()
    plugin(bins, "loopback", "bridge")
    (conf / "10-net.conflist").write_text(conflist("bridge", "portmap"))
    node = network_node(tmp_path, conf, bins)
    assert doctor_network._cni_config(node).types == ["bridge", "portmap"]
    titles = {c.title: c for c in node.checks}
    assert titles[f"CNI config {conf}/10-net.conflist: network 'net', plugins bridge → portmap"].status == OK
    missing = titles["CNI plugins missing: portmap"]
    assert missing.status == FAIL and missing.evidence == [f"searched {bins}"] and missing.more == f"ls {bins}"


def test_a_config_that_does_not_parse_is_named(tmp_path):
    conf, bins = tmp_path / "net.d", tmp_path / "bin"
    conf.mkdir()
    plugin(bins, "loopback")
    (conf / "10-net.conflist").write_text('{"cniVersion": "1.0.0", "plugins": []}')
    (conf / "20-other.conf").write_text(conflist("bridge"))
    node = network_node(tmp_path, conf, bins)
    doctor_network._cni_config(node)
    (check,) = node.checks
    assert check.status == FAIL and check.title.startswith("the CNI config containerd loads is not valid: ")
    assert "name" in check.title and check.evidence == ["containerd uses the first file by name: 10-net.conflist, "
                                                        "20-other.conf"]


def test_an_agent_writing_where_containerd_does_not_read_fails(tmp_path):
    conf, bins, elsewhere = tmp_path / "net.d", tmp_path / "bin", tmp_path / "agent.d"
    conf.mkdir()
    elsewhere.mkdir()
    plugin(bins, "loopback")
    node = network_node(tmp_path, conf, bins, mode="agent")
    node.settings.network.cni_conf_dir = str(elsewhere)
    doctor_network._cni_config(node)
    assert node.checks[0].status == FAIL
    assert node.checks[0].title == f"containerd reads its CNI config from {conf}, but the agent writes it to {elsewhere}"
    assert node.checks[1].title == f"no CNI config in {conf} (it is empty)"


class FakeApiserver:
    host = "https://127.0.0.1:6443"

    def __init__(self, answers):
        self.answers = answers

    async def get(self, path):
        return self.answers[path]


async def test_a_refused_credential_and_a_stale_lease_fail_with_their_reason():
    node = Node(Settings(node_name="n1"), "test")
    api = FakeApiserver({"/api/v1/nodes/n1": (401, {"message": "Unauthorized"}, 0.0)})
    await doctor_api._node_conditions(node, api, "more")
    assert node.checks[0].status == FAIL
    assert node.checks[0].title == "the apiserver at https://127.0.0.1:6443 rejects the node's credentials (401 Unauthorized)"

    stale = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime(time.time() - 125))
    node = Node(Settings(node_name="n1"), "test")
    node.node_object = {"metadata": {"name": "n1"}}
    api = FakeApiserver({"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1":
                         (200, {"spec": {"renewTime": stale, "leaseDurationSeconds": 40, "holderIdentity": "n1"}}, 0)})
    await doctor_api._lease(node, api)
    (check,) = node.checks
    assert check.status == FAIL and check.title.startswith("Lease last renewed 2m")
    assert "the control plane sees the node as gone (Ready=Unknown)" in check.title


async def test_a_ready_node_with_pressure_shows_the_condition_and_a_not_ready_one_fails():
    def node_with(ready: str, **extra):
        return {"metadata": {"name": "n1"}, "spec": {"podCIDR": "10.244.0.0/24"}, "status": {"conditions": [
            {"type": "Ready", "status": ready, "reason": "KubeletNotReady" if ready != "True" else "KubeletReady",
             "message": "container runtime is down" if ready != "True" else "kubelet is posting ready status"},
            *[{"type": k, "status": "True", "message": v} for k, v in extra.items()]]}}
    node = Node(Settings(node_name="n1"), "test")
    await doctor_api._node_conditions(node, FakeApiserver({"/api/v1/nodes/n1": (200, node_with(
        "False", DiskPressure="kubelet has disk pressure"), 0.3)}), "more")
    ok, ready = node.checks
    assert ok.status == OK and ready.status == FAIL
    assert ready.title == "Node n1: Ready=False (KubeletNotReady: container runtime is down)"
    assert ready.evidence == ["DiskPressure=True: kubelet has disk pressure"]
    assert node.apiserver_offset == 0.3 and node.node_object["spec"]["podCIDR"] == "10.244.0.0/24"
    assert WARN not in [c.status for c in node.checks]
