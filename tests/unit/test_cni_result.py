"""CNI results of spec 1.0.0 and 1.1.0 (and 0.4.0): typed values, and the same JSON back."""

from __future__ import annotations

import ipaddress

import pytest

from pykubelet.cni.result import Interface, IPConfig, ResultError, Route, parse_result

NETNS = "/run/netns/cni-1234"

# What Debian's bridge + host-local answer (spec 1.0.0).
BRIDGE_1_0 = {
    "cniVersion": "1.0.0",
    "interfaces": [
        {"name": "cni0", "mac": "1a:39:a4:40:ce:87"},
        {"name": "vethf4ad5bc3", "mac": "b2:8b:37:c4:2c:69"},
        {"name": "eth0", "mac": "7e:f0:10:9f:8f:7a", "sandbox": NETNS},
    ],
    "ips": [{"interface": 2, "address": "10.199.3.2/24", "gateway": "10.199.3.1"}],
    "routes": [{"dst": "0.0.0.0/0"}],
    "dns": {},
}

# A dual-stack 1.1.0 answer with the fields 1.1.0 added.
DUAL_1_1 = {
    "cniVersion": "1.1.0",
    "interfaces": [
        {"name": "cni0", "mac": "1a:39:a4:40:ce:87", "mtu": 1500},
        {"name": "eth0", "mac": "7e:f0:10:9f:8f:7a", "mtu": 1450, "sandbox": NETNS,
         "socketPath": "/run/vhost.sock", "pciID": "0000:00:1f.6"},
    ],
    "ips": [
        {"interface": 1, "address": "fd00:10::5/64", "gateway": "fd00:10::1"},
        {"interface": 1, "address": "10.1.0.5/16", "gateway": "10.1.0.1"},
        {"address": "192.168.9.9/32"},
    ],
    "routes": [
        {"dst": "0.0.0.0/0", "gw": "10.1.0.1", "mtu": 1400, "advmss": 1360, "priority": 10, "table": 100, "scope": 0},
        {"dst": "::/0"},
    ],
    "dns": {"nameservers": ["10.96.0.10"], "search": ["svc.cluster.local"]},
}


def test_a_bridge_result_gives_the_pod_ip_on_eth0():
    result = parse_result(BRIDGE_1_0, "1.0.0")
    assert result.cni_version == "1.0.0"
    assert result.interfaces[2] == Interface(name="eth0", mac="7e:f0:10:9f:8f:7a", sandbox=NETNS)
    assert result.ip_of() == IPConfig(address=ipaddress.ip_interface("10.199.3.2/24"),
                                      gateway=ipaddress.ip_address("10.199.3.1"), interface=2)
    assert result.ip_of(family=6) is None
    assert result.ip_of("cni0") is None  # the bridge holds no pod IP
    assert result.routes == (Route(dst=ipaddress.ip_network("0.0.0.0/0")),)
    assert result.to_dict() == BRIDGE_1_0


def test_a_1_1_result_keeps_its_new_fields_and_both_families():
    result = parse_result(DUAL_1_1, "1.1.0")
    assert str(result.ip_of("eth0", 4).address) == "10.1.0.5/16"
    assert str(result.ip_of("eth0", 6).address) == "fd00:10::5/64"
    assert result.interfaces[1].mtu == 1450 and result.interfaces[1].pci_id == "0000:00:1f.6"
    assert result.routes[0].table == 100 and result.routes[0].gw == ipaddress.ip_address("10.1.0.1")
    assert result.ips[2].interface is None
    assert result.dns["nameservers"] == ["10.96.0.10"]
    assert result.to_dict() == DUAL_1_1


def test_a_0_4_result_loses_the_ip_version_field_in_1_0_format_and_keeps_it_in_its_own():
    old = {"cniVersion": "0.4.0", "interfaces": [{"name": "eth0", "sandbox": NETNS}],
           "ips": [{"version": "4", "interface": 0, "address": "10.2.0.7/24", "gateway": "10.2.0.1"}], "dns": {}}
    result = parse_result(old, "0.4.0")
    assert str(result.ip_of().address) == "10.2.0.7/24"
    assert result.to_dict() == old
    assert result.to_dict("1.0.0")["ips"] == [{"interface": 0, "address": "10.2.0.7/24", "gateway": "10.2.0.1"}]
    assert result.to_dict("1.0.0")["cniVersion"] == "1.0.0"


def test_fields_we_do_not_model_survive_the_round_trip():
    data = dict(BRIDGE_1_0, **{"cni.dev/plugin-extra": {"x": 1}})
    assert parse_result(data, "1.0.0").to_dict()["cni.dev/plugin-extra"] == {"x": 1}


def test_the_requested_version_is_used_when_the_result_has_none():
    assert parse_result({"ips": [{"address": "10.0.0.2/8"}]}, "1.0.0").cni_version == "1.0.0"


@pytest.mark.parametrize("data, message", [
    ({"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.300/8"}]}, "ips[0].address: invalid CIDR '10.0.0.300/8'"),
    ({"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.3/8", "gateway": "gw"}]}, "ips[0].gateway: invalid IP 'gw'"),
    ({"cniVersion": "1.0.0", "interfaces": [{"name": "eth0"}], "ips": [{"address": "10.0.0.3/8", "interface": 1}]},
     "ips[0].interface: index 1 but only 1 interfaces"),
    ({"cniVersion": "1.0.0", "routes": [{"dst": "default"}]}, "routes[0].dst: invalid CIDR 'default'"),
    ({"cniVersion": "1.0.0", "routes": [{"dst": "0.0.0.0/0", "mtu": -1}]}, "routes[0].mtu: must be a non-negative integer"),
    ({"cniVersion": "1.0.0", "interfaces": [{"mac": "aa"}]}, "interfaces[0].name: required"),
    ({"cniVersion": "1.0.0", "interfaces": {}}, "interfaces: must be a list"),
    ({"cniVersion": "0.2.0"}, "cniVersion: unsupported result version '0.2.0'"),
])
def test_invalid_results_name_the_field(data, message):
    with pytest.raises(ResultError) as caught:
        parse_result(data, "1.0.0")
    assert str(caught.value).startswith(message), str(caught.value)
