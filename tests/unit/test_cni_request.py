"""What each plugin of a chain receives: stdin config and CNI_* environment."""

from __future__ import annotations

import pytest

from pykubelet.cni.config import parse_conflist
from pykubelet.cni.request import Attachment, format_cni_args, gc_request, plugin_env, plugin_request

NET = parse_conflist({
    "cniVersion": "1.0.0",
    "name": "pods",
    "plugins": [
        {"type": "bridge", "cniVersion": "0.3.1", "name": "other", "bridge": "cni0",
         "ipam": {"type": "host-local", "subnet": "10.1.0.0/16"}},
        {"type": "tuning", "capabilities": {"mac": True, "portMappings": False}, "sysctl": {"a": "1"}},
        {"type": "portmap", "capabilities": {"portMappings": True}},
    ],
})
PORTS = [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp", "hostIP": ""}]
CAPS = {"portMappings": PORTS, "mac": "c2:11:22:33:44:55", "bandwidth": {"ingressRate": 1}}
PREV = {"cniVersion": "1.0.0", "ips": [{"address": "10.1.0.5/16"}]}


def test_the_first_plugin_gets_the_network_name_and_version_and_no_prev_result():
    request = plugin_request(NET.name, NET.cni_version, NET.plugins[0], CAPS, None)
    assert request == {"type": "bridge", "cniVersion": "1.0.0", "name": "pods", "bridge": "cni0",
                       "ipam": {"type": "host-local", "subnet": "10.1.0.0/16"}}


def test_runtime_config_holds_only_the_capabilities_a_plugin_enables():
    tuning = plugin_request(NET.name, NET.cni_version, NET.plugins[1], CAPS, PREV)
    assert tuning["runtimeConfig"] == {"mac": "c2:11:22:33:44:55"}  # portMappings is false there
    portmap = plugin_request(NET.name, NET.cni_version, NET.plugins[2], CAPS, PREV)
    assert portmap == {"type": "portmap", "name": "pods", "cniVersion": "1.0.0",
                       "runtimeConfig": {"portMappings": PORTS}, "prevResult": PREV}
    assert "capabilities" not in tuning and "capabilities" not in portmap  # the spec: must not be set


def test_no_runtime_config_without_capability_args():
    assert "runtimeConfig" not in plugin_request("pods", "1.0.0", NET.plugins[2], {}, PREV)


def test_the_request_is_a_copy():
    request = plugin_request(NET.name, NET.cni_version, NET.plugins[2], CAPS, PREV)
    request["runtimeConfig"]["portMappings"].append({"hostPort": 1})
    request["prevResult"]["ips"].clear()
    assert PORTS == [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp", "hostIP": ""}]
    assert PREV["ips"] and "runtimeConfig" not in NET.plugins[2]


def test_gc_lists_the_valid_attachments():
    valid = [Attachment("abc", "/run/netns/x"), Attachment("def", "", ifname="net1")]
    request = gc_request("pods", "1.1.0", NET.plugins[2], valid)
    expected = [{"containerID": "abc", "ifname": "eth0"}, {"containerID": "def", "ifname": "net1"}]
    assert request["cni.dev/valid-attachments"] == expected
    assert request["cniVersion"] == "1.1.0" and request["name"] == "pods"
    assert "capabilities" not in request


def test_cni_args_start_with_ignore_unknown():
    args = (("K8S_POD_NAMESPACE", "default"), ("K8S_POD_NAME", "web"), ("K8S_POD_UID", "u-1"))
    assert format_cni_args(args) == "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web;K8S_POD_UID=u-1"
    assert format_cni_args(()) == ""
    assert format_cni_args((("IgnoreUnknown", "0"), ("A", "b"))) == "IgnoreUnknown=0;A=b"


@pytest.mark.parametrize("pair", [("K;X", "v"), ("K=X", "v"), ("", "v"), ("K", "a;b")])
def test_cni_args_that_would_be_misread_are_rejected(pair):
    with pytest.raises(ValueError, match="invalid CNI_ARGS pair"):
        format_cni_args([pair])


def test_the_environment_of_an_attachment_command():
    att = Attachment("abc", "/run/netns/x", "eth1", args=(("K8S_POD_NAME", "web"),))
    assert plugin_env("ADD", ["/usr/lib/cni", "/opt/cni/bin"], att) == {
        "CNI_COMMAND": "ADD", "CNI_PATH": "/usr/lib/cni:/opt/cni/bin", "CNI_CONTAINERID": "abc",
        "CNI_NETNS": "/run/netns/x", "CNI_IFNAME": "eth1", "CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAME=web"}
    assert plugin_env("GC", ["/usr/lib/cni"]) == {"CNI_COMMAND": "GC", "CNI_PATH": "/usr/lib/cni"}


@pytest.mark.parametrize("kwargs, message", [
    ({"container_id": ""}, "invalid CNI container ID"),
    ({"container_id": "-x"}, "invalid CNI container ID"),
    ({"ifname": ""}, "invalid interface name '': required"),
    ({"ifname": "a-very-long-ifname"}, "longer than 15"),
    ({"ifname": "eth/0"}, "no '/'"),
    ({"args": (("A;B", "1"),)}, "invalid CNI_ARGS pair"),
])
def test_invalid_attachments_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Attachment(**{"container_id": "abc", "netns": "/run/netns/x", **kwargs})


def test_attachments_are_hashable_keys():
    caps = {"portMappings": PORTS}
    assert len({Attachment("abc", "/x", capability_args=caps), Attachment("abc", "/x", capability_args=dict(caps))}) == 1
