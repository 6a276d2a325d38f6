"""How a static pod is named on the node: <name>-<node>, a content-hashed UID, the config.* annotations."""

from __future__ import annotations

import re

import pytest

from pykubelet.sources.static_naming import (CONFIG_HASH_ANNOTATION, CONFIG_SOURCE_ANNOTATION,
                                             apply_static_defaults, static_pod_uid)

NODE = "node1"
PATH = "/etc/kubernetes/manifests/web.yaml"


def manifest(**meta) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", **meta},
            "spec": {"containers": [{"name": "app", "image": "busybox:1.36"}]}}


def test_name_gets_the_node_name_appended():
    assert apply_static_defaults(manifest(), NODE, PATH)["metadata"]["name"] == "web-node1"


def test_namespace_defaults_to_default_and_an_explicit_one_is_kept():
    assert apply_static_defaults(manifest(), NODE, PATH)["metadata"]["namespace"] == "default"
    assert apply_static_defaults(manifest(namespace="kube-system"), NODE, PATH)["metadata"]["namespace"] == \
        "kube-system"


def test_uid_is_32_hex_digits():
    uid = apply_static_defaults(manifest(), NODE, PATH)["metadata"]["uid"]
    assert re.fullmatch(r"[0-9a-f]{32}", uid)


def test_uid_is_stable_for_the_same_content_node_and_file():
    reordered = {"spec": manifest()["spec"], "metadata": {"name": "web"}, "kind": "Pod", "apiVersion": "v1"}
    uids = {apply_static_defaults(m, NODE, PATH)["metadata"]["uid"] for m in (manifest(), manifest(), reordered)}
    assert len(uids) == 1


def changed_image() -> dict:
    m = manifest()
    m["spec"]["containers"][0]["image"] = "busybox:1.37"
    return m


@pytest.mark.parametrize("other", [
    pytest.param((changed_image(), NODE, PATH), id="content"),
    pytest.param((manifest(labels={"a": "b"}), NODE, PATH), id="labels"),
    pytest.param((manifest(), "node2", PATH), id="node"),
    pytest.param((manifest(), NODE, "/etc/kubernetes/manifests/web2.yaml"), id="file"),
])
def test_uid_changes_with_content_node_or_file(other):
    assert static_pod_uid(*other) != static_pod_uid(manifest(), NODE, PATH)


def test_explicit_uid_is_kept():
    pod = apply_static_defaults(manifest(uid="1234-abcd"), NODE, PATH)
    assert pod["metadata"]["uid"] == "1234-abcd"
    assert pod["metadata"]["annotations"][CONFIG_HASH_ANNOTATION] == "1234-abcd"


def test_config_annotations_mark_a_file_pod_and_keep_the_users_annotations():
    pod = apply_static_defaults(manifest(annotations={"team": "web"}), NODE, PATH)
    annotations = pod["metadata"]["annotations"]
    assert annotations[CONFIG_HASH_ANNOTATION] == pod["metadata"]["uid"]
    assert annotations[CONFIG_SOURCE_ANNOTATION] == "file"
    assert annotations["team"] == "web"


def test_node_name_is_set_in_the_spec():
    assert apply_static_defaults(manifest(), NODE, PATH)["spec"]["nodeName"] == NODE

