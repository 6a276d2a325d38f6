"""Network config lists: what a valid file gives, and errors that name the file and the field."""

from __future__ import annotations

import json

import pytest

from pykubelet.cni.config import ConfigError, load_conflist, parse_conflist

SOURCE = "/etc/cni/net.d/x.conflist"


def conflist(**overrides):
    data = {
        "cniVersion": "1.0.0",
        "name": "pods",
        "plugins": [
            {"type": "bridge", "bridge": "cni0", "ipam": {"type": "host-local", "subnet": "10.1.0.0/16"}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }
    data.update(overrides)
    return data


def test_a_conflist_keeps_its_plugins_in_order_with_unknown_fields():
    net = parse_conflist(json.dumps(conflist()), SOURCE)
    assert (net.name, net.cni_version, net.source) == ("pods", "1.0.0", SOURCE)
    assert [p["type"] for p in net.plugins] == ["bridge", "portmap"]
    assert net.plugins[0]["bridge"] == "cni0"
    assert not net.disable_check and not net.disable_gc


def test_bytes_and_dicts_are_accepted_and_inline_is_the_default_source():
    assert parse_conflist(json.dumps(conflist()).encode()).source == "<inline>"
    assert parse_conflist(conflist()).plugins[1]["capabilities"] == {"portMappings": True}


def test_a_single_plugin_conf_is_a_list_of_one():
    net = parse_conflist({"cniVersion": "0.4.0", "name": "lo", "type": "loopback"}, "/etc/cni/net.d/99-lo.conf")
    assert (net.name, net.cni_version) == ("lo", "0.4.0")
    assert [p["type"] for p in net.plugins] == ["loopback"]


def test_the_highest_supported_of_cniVersion_and_cniVersions_is_selected():
    assert parse_conflist(conflist(cniVersion="0.4.0", cniVersions=["1.1.0", "1.0.0", "9.0.0"])).cni_version == "1.1.0"
    assert parse_conflist(conflist(cniVersion="1.1.0")).cni_version == "1.1.0"


def test_disable_check_and_gc_accept_booleans_and_their_strings():
    net = parse_conflist(conflist(disableCheck=True, disableGC="true"))
    assert net.disable_check and net.disable_gc


@pytest.mark.parametrize("data, message", [
    (conflist(plugins=[{"type": "bridge"}, {"capabilities": {}}]), f"{SOURCE}: plugins[1].type: required"),
    (conflist(plugins=[{"type": "bridge"}, {"type": "../bin/sh"}]), f"{SOURCE}: plugins[1].type: invalid plugin type"),
    (conflist(plugins=[]), f"{SOURCE}: plugins: must name at least one plugin"),
    (conflist(plugins={"type": "bridge"}), f"{SOURCE}: plugins: must be a list"),
    (conflist(plugins=["bridge"]), f"{SOURCE}: plugins[0]: must be a plugin object, not str"),
    (conflist(plugins=[{"type": "portmap", "capabilities": {"portMappings": "yes"}}]),
     f"{SOURCE}: plugins[0].capabilities: must be an object"),
    (conflist(plugins=[{"type": "bridge", "ipam": "host-local"}]), f"{SOURCE}: plugins[0].ipam: must be an object"),
    (conflist(name=""), f"{SOURCE}: name: required"),
    (conflist(name="-pods"), f"{SOURCE}: name: invalid network name '-pods'"),
    (conflist(name="a/b"), f"{SOURCE}: name: invalid network name"),
    ({"name": "pods", "plugins": [{"type": "bridge"}]}, f"{SOURCE}: cniVersion: required"),
    (conflist(cniVersion="0.2.0"), f"{SOURCE}: cniVersion: unsupported version '0.2.0' (supported: 0.3.0"),
    (conflist(cniVersion=1), f"{SOURCE}: cniVersion: must be a string"),
    (conflist(cniVersions="1.0.0"), f"{SOURCE}: cniVersions: must be a list"),
    (conflist(disableCheck="maybe"), f"{SOURCE}: disableCheck: must be true or false"),
    ({"cniVersion": "1.0.0", "name": "pods"}, f"{SOURCE}: plugins: required"),
    ([conflist()], f"{SOURCE}: must be a JSON object, not list"),
    ("{not json", f"{SOURCE}: invalid JSON"),
])
def test_invalid_configs_name_the_source_and_field(data, message):
    with pytest.raises(ConfigError) as caught:
        parse_conflist(data, SOURCE)
    assert str(caught.value).startswith(message), str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_load_conflist_reads_a_file_and_errors_name_it(tmp_path):
    good = tmp_path / "10-pods.conflist"
    good.write_text(json.dumps(conflist()))
    assert load_conflist(good).source == str(good)

    bad = tmp_path / "20-bad.conflist"
    bad.write_text(json.dumps(conflist(plugins=[{"type": "bridge"}, {}])))
    with pytest.raises(ConfigError, match=f"^{bad}: plugins\\[1\\].type: required$"):
        load_conflist(bad)

    with pytest.raises(ConfigError, match=f"^{tmp_path}/missing.conflist: cannot read"):
        load_conflist(tmp_path / "missing.conflist")
