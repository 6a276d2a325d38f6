"""Static pod manifests: parsing, API defaults, errors naming the file and field, and the directory scan."""

from __future__ import annotations

import json
import logging
import pathlib
import textwrap

import pytest

from pykubelet.api.errors import InvalidObject
from pykubelet.api.pod import parse_pod
from pykubelet.sources import static_files
from pykubelet.sources.static_files import ManifestError, StaticPodSource, list_manifest_files, read_manifest

NODE = "node1"

GOOD_YAML = """\
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {app: web}
spec:
  containers:
  - name: app
    image: busybox
    command: [sh, -c, "echo hi"]
    ports:
    - containerPort: 80
      hostPort: 8080
"""

GOOD_JSON = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "api", "namespace": "kube-system"},
    "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 5,
             "containers": [{"name": "main", "image": "busybox:1.36", "args": ["sleep", "1"]}]},
}


def pod_yaml(containers: str = "- {name: app, image: busybox}", spec: str = "", kind: str = "Pod") -> str:
    return f"apiVersion: v1\nkind: {kind}\nmetadata: {{name: p}}\nspec:\n{textwrap.indent(spec, '  ')}" \
           f"  containers:\n{textwrap.indent(containers, '  ')}\n"


def write(tmp_path: pathlib.Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_yaml_manifest_becomes_a_pod_named_for_the_node(tmp_path):
    pod, _ = read_manifest(write(tmp_path, "web.yaml", GOOD_YAML), NODE)
    assert pod.full_name == "default/web-node1"
    assert pod.labels == {"app": "web"}
    (app,) = pod.containers
    assert (app.name, app.image, app.command) == ("app", "busybox", ("sh", "-c", "echo hi"))
    assert [(p.container_port, p.host_port, p.protocol) for p in app.ports] == [(80, 8080, "TCP")]


def test_json_manifest_becomes_a_pod(tmp_path):
    pod, _ = read_manifest(write(tmp_path, "api.json", json.dumps(GOOD_JSON)), NODE)
    assert pod.full_name == "kube-system/api-node1"
    assert pod.restart_policy == "Never"
    assert pod.termination_grace_period_seconds == 5
    assert pod.containers[0].args == ("sleep", "1")


def test_pod_defaults_follow_the_api():
    pod = parse_pod({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}},
                    where="test")
    assert pod.namespace == "default"
    assert pod.restart_policy == "Always"
    assert pod.termination_grace_period_seconds == 30
    assert pod.host_network is False


@pytest.mark.parametrize("image, policy", [
    ("busybox", "Always"),
    ("busybox:latest", "Always"),
    ("docker.io/library/busybox:latest", "Always"),
    ("registry.local:5000/busybox", "Always"),         # a registry port is not a tag
    ("busybox:1.36", "IfNotPresent"),
    ("registry.local:5000/busybox:1.36", "IfNotPresent"),
    ("busybox@sha256:" + "a" * 64, "IfNotPresent"),
    ("busybox:latest@sha256:" + "a" * 64, "Always"),    # the tag is still "latest" (API defaulting)
])
def test_image_pull_policy_defaults_from_the_tag(image, policy):
    pod = parse_pod({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": image}]}}, "test")
    assert pod.containers[0].image_pull_policy == policy


def test_explicit_image_pull_policy_is_kept():
    raw = {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "c", "image": "busybox:latest", "imagePullPolicy": "Never"}]}}
    assert parse_pod(raw, "test").containers[0].image_pull_policy == "Never"


@pytest.mark.parametrize("text, error", [
    (pod_yaml("- {name: app}"),
     "spec.containers[0].image: Required value"),
    (pod_yaml(spec="restartPolicy: Sometimes\n"),
     "spec.restartPolicy: Unsupported value: 'Sometimes'"),
    (pod_yaml("- {name: app, image: a}\n- {name: app, image: b}"),
     "spec.containers[1].name: Duplicate value: 'app'"),
    (pod_yaml("- {name: app, image: a, ports: [{containerPort: 70000}]}"),
     "spec.containers[0].ports[0].containerPort: Invalid value: 70000"),
    (pod_yaml("- {name: app, image: a, ports: [{containerPort: 0}]}"),
     "spec.containers[0].ports[0].containerPort: Invalid value: 0"),
    (pod_yaml("- {name: app, image: a, ports: [{hostPort: 80}]}"),
     "spec.containers[0].ports[0].containerPort: Required value"),
    (pod_yaml("- {name: app, image: a, command: [sh, 1]}"),
     "spec.containers[0].command[1]: must be a string"),
    (pod_yaml("- {name: app, image: a, args: [--port, 8080]}"),
     "spec.containers[0].args[1]: must be a string"),
    (pod_yaml("- {name: App_1, image: a}"),
     "spec.containers[0].name: Invalid value: 'App_1'"),
    (pod_yaml(spec="terminationGracePeriodSeconds: -1\n"),
     "spec.terminationGracePeriodSeconds: Invalid value: -1"),
    (pod_yaml(kind="Deployment"),
     "kind: Unsupported value: 'Deployment'"),
    ("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {}\n",
     "spec.containers: Required value"),
    ("apiVersion: v1\nkind: Pod\nspec: {containers: [{name: a, image: b}]}\n",
     "metadata.name: Required value"),
])
def test_invalid_manifest_error_names_the_file_and_the_field(tmp_path, text, error):
    path = write(tmp_path, "pod.yaml", text)
    with pytest.raises(ManifestError) as caught:
        read_manifest(path, NODE)
    message = str(caught.value)
    assert message.startswith(path + ": ")
    assert error in message


def test_every_bad_field_is_reported_at_once(tmp_path):
    path = write(tmp_path, "pod.yaml", pod_yaml("- {name: app}", spec="restartPolicy: Sometimes\n"))
    with pytest.raises(ManifestError) as caught:
        read_manifest(path, NODE)
    assert "spec.containers[0].image: Required value" in str(caught.value)
    assert "spec.restartPolicy: Unsupported value" in str(caught.value)


def test_parse_pod_error_lists_field_paths():
    with pytest.raises(InvalidObject) as caught:
        parse_pod({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}, where="api")
    assert [e.path for e in caught.value.errors] == ["spec.containers[0].image"]
    assert str(caught.value).startswith('api: Pod "p" is invalid')


@pytest.mark.parametrize("name, text, error", [
    ("pod.yaml", "containers: [\n", "not valid YAML"),
    ("pod.json", "{not json", "not valid JSON"),
    ("pod.yaml", GOOD_YAML + "---\n" + GOOD_YAML, "exactly one Pod, found 2 documents"),
    ("pod.yaml", "", "exactly one Pod, found 0 documents"),
    ("pod.yaml", "---\n# only a comment\n", "exactly one Pod, found 0 documents"),
    ("pod.yaml", "just some words\n", "must hold a Pod object, found a str"),
    ("pod.yaml", "- a\n- b\n", "must hold a Pod object, found a list"),
])
def test_file_that_is_not_one_pod_is_an_error_naming_the_file(tmp_path, name, text, error):
    path = write(tmp_path, name, text)
    with pytest.raises(ManifestError) as caught:
        read_manifest(path, NODE)
    assert str(caught.value).startswith(path + ": ")
    assert error in str(caught.value)


def test_hidden_files_and_directories_are_not_manifests(tmp_path):
    write(tmp_path, "web.yaml", GOOD_YAML)
    write(tmp_path, "notes.txt", "x")  # the kubelet reads every non-hidden file, whatever its suffix
    write(tmp_path, ".web.yaml.swp", "x")
    write(tmp_path, ".foo.yaml", GOOD_YAML)
    (tmp_path / "sub.yaml").mkdir()
    assert list_manifest_files(str(tmp_path)) == [str(tmp_path / "notes.txt"), str(tmp_path / "web.yaml")]


def test_a_single_file_path_is_its_own_manifest_list(tmp_path):
    path = write(tmp_path, "web.yaml", GOOD_YAML)
    assert list_manifest_files(path) == [path]


def test_missing_directory_has_no_manifests(tmp_path):
    assert list_manifest_files(str(tmp_path / "absent")) == []


def error_logs_about(caplog, path: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.ERROR and f'file="{path}"' in r.getMessage()]


def test_scan_returns_good_pods_next_to_bad_files_and_logs_each_error_once(tmp_path, caplog):
    write(tmp_path, "web.yaml", GOOD_YAML)
    write(tmp_path, "api.json", json.dumps(GOOD_JSON))
    no_image = write(tmp_path, "no-image.yaml", pod_yaml("- {name: app}"))
    empty = write(tmp_path, "empty.yaml", "")
    write(tmp_path, ".hidden.yaml", "not: [a pod")
    source = StaticPodSource(str(tmp_path), NODE, 20.0, on_pods=lambda pods: None)

    with caplog.at_level(logging.INFO, logger=static_files.__name__):
        first, _ = source.scan()
        second, _ = source.scan()

    assert sorted(p.full_name for p in first) == ["default/web-node1", "kube-system/api-node1"]
    assert sorted(p.uid for p in second) == sorted(p.uid for p in first)
    no_image_logs = error_logs_about(caplog, no_image)
    assert len(no_image_logs) == 1
    assert "spec.containers[0].image: Required value" in no_image_logs[0]
    assert len(error_logs_about(caplog, empty)) == 1
    assert not any(".hidden.yaml" in r.getMessage() for r in caplog.records)


def test_scan_logs_a_file_again_when_its_error_changes_and_picks_it_up_once_fixed(tmp_path, caplog):
    path = write(tmp_path, "p.yaml", pod_yaml("- {name: app}"))
    source = StaticPodSource(str(tmp_path), NODE, 20.0, on_pods=lambda pods: None)
    with caplog.at_level(logging.INFO, logger=static_files.__name__):
        source.scan()
        write(tmp_path, "p.yaml", pod_yaml(spec="restartPolicy: Sometimes\n"))
        source.scan()
        assert len(error_logs_about(caplog, path)) == 2
        write(tmp_path, "p.yaml", pod_yaml())
        pods, _ = source.scan()
    assert [p.full_name for p in pods] == ["default/p-node1"]
    assert any("valid again" in r.getMessage() and path in r.getMessage() for r in caplog.records)


def test_two_files_with_the_same_uid_run_one_pod_and_name_the_duplicate(tmp_path, caplog):
    text = "kind: Pod\nmetadata: {name: p, uid: fixed-uid}\nspec: {containers: [{name: a, image: b}]}\n"
    write(tmp_path, "a.yaml", text)
    dup = write(tmp_path, "b.yaml", text)
    source = StaticPodSource(str(tmp_path), NODE, 20.0, on_pods=lambda pods: None)
    with caplog.at_level(logging.ERROR, logger=static_files.__name__):
        pods, _ = source.scan()
    assert [p.uid for p in pods] == ["fixed-uid"]
    assert any("fixed-uid" in m for m in error_logs_about(caplog, dup))


def test_fields_not_supported_yet_are_named_for_a_warning():
    from pykubelet.api.pod import unsupported_fields

    pod = parse_pod({"metadata": {"name": "web"}, "spec": {
        "volumes": [{"name": "data", "emptyDir": {}}, {"name": "cfg", "configMap": {"name": "c"}},
                    {"name": "disk", "nfs": {"server": "x", "path": "/"}}],
        "runtimeClassName": "gvisor", "hostNetwork": False,
        "containers": [{"name": "app", "image": "busybox:1.36", "volumeMounts": [{"name": "data", "mountPath": "/d"}],
                        "env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}},
                                {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                                {"name": "C", "valueFrom": {"fileKeyRef": {"path": "x", "key": "k"}}}],
                        "livenessProbe": {"exec": {"command": ["true"]}}}]}}, "web.yaml")
    assert unsupported_fields(pod) == ["spec.runtimeClassName", "spec.volumes[2].nfs",
                                       "spec.containers[0].env[2].valueFrom"]


@pytest.mark.parametrize("spec_patch", [
    {"volumes": [True]},
    {"containers": [{"name": "a", "image": "busybox", "env": [True]}]},
    {"containers": [{"name": "a", "image": "busybox", "envFrom": ["x"]}]},
    {"imagePullSecrets": "nope"},
])
def test_a_manifest_with_items_of_the_wrong_type_does_not_break_the_reader(tmp_path, spec_patch):
    doc = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "odd"},
           "spec": {"containers": [{"name": "a", "image": "busybox"}], **spec_patch}}
    path = tmp_path / "odd.yaml"
    path.write_text(json.dumps(doc))
    try:
        read_manifest(str(path), NODE)
    except ManifestError as e:
        assert str(path) in str(e)


def test_annotations_over_the_apiservers_limit_are_invalid():
    doc = json.loads(json.dumps(GOOD_JSON))
    doc["metadata"]["annotations"] = {"filler": "x" * (256 * 1024)}
    with pytest.raises(InvalidObject, match="metadata.annotations: Too long: must have at most 262144 bytes"):
        parse_pod(doc, where="big.json")


def test_symlinks_that_lead_nowhere_are_reported_by_name(tmp_path):
    (tmp_path / "loop.yaml").symlink_to("loop.yaml")
    (tmp_path / "dangling.yaml").symlink_to("missing.yaml")
    (tmp_path / "sub").mkdir()
    files = list_manifest_files(str(tmp_path))
    assert files == [str(tmp_path / "dangling.yaml"), str(tmp_path / "loop.yaml")]
    for file in files:
        with pytest.raises(ManifestError, match=f"{file}: cannot read"):
            read_manifest(file, NODE)


def propagation_pod(mode, privileged=None):
    container = {"name": "c", "image": "busybox:1.36",
                 "volumeMounts": [{"name": "v", "mountPath": "/m", "mountPropagation": mode}]}
    if privileged is not None:
        container["securityContext"] = {"privileged": privileged}
    return {"metadata": {"name": "p"}, "spec": {"volumes": [{"name": "v", "emptyDir": {}}],
                                                "containers": [container]}}


@pytest.mark.parametrize("mode, privileged, kept", [
    (None, None, ""), ("None", None, "None"), ("HostToContainer", None, "HostToContainer"),
    ("Bidirectional", True, "Bidirectional"),
])
def test_mount_propagation_is_read_from_the_volume_mount(mode, privileged, kept):
    mount = parse_pod(propagation_pod(mode, privileged), "test").containers[0].volume_mounts[0]
    assert mount.mount_propagation == kept


@pytest.mark.parametrize("mode, privileged, error", [
    ("Sideways", None, "spec.containers[0].volumeMounts[0].mountPropagation: Unsupported value: 'Sideways': "
                       'supported values: "Bidirectional", "HostToContainer", "None"'),
    ("Bidirectional", None, "spec.containers[0].volumeMounts[0].mountPropagation: Forbidden: "
                            "Bidirectional mount propagation is available only to privileged containers"),
    ("Bidirectional", False, "Bidirectional mount propagation is available only to privileged containers"),
])
def test_a_bad_or_forbidden_mount_propagation_names_the_field(mode, privileged, error):
    with pytest.raises(InvalidObject) as caught:
        parse_pod(propagation_pod(mode, privileged), "test")
    assert error in str(caught.value)
