"""Manifests that attack the agent: a UID that is a path, an alias bomb, an oversized file.
Each is refused with an error naming the file and the field, and the other manifests still run."""

from __future__ import annotations

import json
import textwrap

import pytest

from pykubelet.config import ConfigError, load_config_file
from pykubelet.config.settings import Settings
from pykubelet.sources.static_files import ManifestError, StaticPodSource, read_manifest
from pykubelet.util import yamlfile

GOOD = textwrap.dedent("""\
    apiVersion: v1
    kind: Pod
    metadata: {name: good}
    spec:
      containers: [{name: app, image: busybox}]
    """)


def manifest_with_uid(uid: str) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "evil", "uid": uid},
                       "spec": {"containers": [{"name": "app", "image": "busybox"}]}})


def alias_bomb(levels: int = 9) -> str:
    """The billion laughs: 9 levels of 9 aliases each, 9**9 strings once expanded."""
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [{','.join([f'*l{i - 1}'] * 9)}]")
    return textwrap.dedent("""\
        apiVersion: v1
        kind: Pod
        metadata:
          name: bomb
          annotations:
        """) + "".join(f"    {line}\n" for line in lines) + "spec:\n  containers: [{name: app, image: busybox}]\n"


@pytest.mark.parametrize("uid", ["../../tmp/x", "/tmp/x", "..", ".", "a/b", "x\ny", "-leading-dash", "a" * 129])
def test_a_uid_that_is_not_a_plain_name_is_refused_naming_the_field(tmp_path, uid):
    path = tmp_path / "evil.yaml"
    path.write_text(manifest_with_uid(uid))
    with pytest.raises(ManifestError) as e:
        read_manifest(str(path), "node1")
    assert str(path) in str(e.value) and "metadata.uid" in str(e.value)


@pytest.mark.parametrize("uid", ["3f1c0b6e-1d2a-4c55-9d7e-2b1f7d3c9a10", "0123456789abcdef0123456789abcdef", "my.uid_1"])
def test_uuids_and_hex_uids_are_kept(tmp_path, uid):
    path = tmp_path / "ok.yaml"
    path.write_text(manifest_with_uid(uid))
    pod, _ = read_manifest(str(path), "node1")
    assert pod.uid == uid


def test_a_volume_name_that_is_a_path_is_refused_naming_the_field(tmp_path):
    path = tmp_path / "vol.yaml"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "v"},
                                "spec": {"volumes": [{"name": "../../../x", "emptyDir": {}}],
                                         "containers": [{"name": "app", "image": "busybox"}]}}))
    with pytest.raises(ManifestError, match=r"spec\.volumes\[0\]\.name"):
        read_manifest(str(path), "node1")


def test_other_manifests_keep_running_next_to_a_path_uid_and_a_bomb(tmp_path):
    (tmp_path / "good.yaml").write_text(GOOD)
    (tmp_path / "evil.yaml").write_text(manifest_with_uid("../../x"))
    (tmp_path / "bomb.yaml").write_text(alias_bomb())
    source = StaticPodSource(str(tmp_path), "node1", 20.0, lambda pods: None)
    pods, _ = source.scan()
    assert [p.name for p in pods] == ["good-node1"]
    assert "metadata.uid" in source._reported[str(tmp_path / "evil.yaml")]
    assert "alias" in source._reported[str(tmp_path / "bomb.yaml")]


def test_an_alias_bomb_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(alias_bomb())
    with pytest.raises(ManifestError) as e:
        read_manifest(str(path), "node1")
    assert str(path) in str(e.value) and "alias" in str(e.value)


def test_a_recursive_alias_is_refused(tmp_path):
    path = tmp_path / "loop.yaml"
    path.write_text(GOOD + "extra: &a [*a]\n")
    with pytest.raises(ManifestError, match="recursive alias"):
        read_manifest(str(path), "node1")


def test_modest_use_of_anchors_and_merge_keys_still_works(tmp_path):
    path = tmp_path / "anchors.yaml"
    path.write_text(textwrap.dedent("""\
        apiVersion: v1
        kind: Pod
        metadata: {name: anchors, labels: &labels {app: web}, annotations: *labels}
        spec:
          containers:
          - &app {name: app, image: busybox, env: [{name: A, value: "1"}]}
          - {<<: *app, name: app2}
        """))
    pod, _ = read_manifest(str(path), "node1")
    assert [c.name for c in pod.containers] == ["app", "app2"] and pod.annotations["app"] == "web"


def test_a_manifest_over_10_mib_is_refused_without_reading_it_all(tmp_path):
    path = tmp_path / "huge.yaml"
    with open(path, "wb") as f:
        f.write(GOOD.encode())
        f.truncate(yamlfile.MAX_FILE_BYTES + 1)
    with pytest.raises(ManifestError, match="larger than"):
        read_manifest(str(path), "node1")


def test_a_config_file_with_an_alias_bomb_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
                    + alias_bomb().split("spec:")[0].replace("metadata:", "x:"))
    with pytest.raises(ConfigError) as e:
        load_config_file(str(path), Settings())
    assert str(path) in str(e.value) and "alias" in str(e.value)
