"""Fuzzed input: whatever a manifest, an API object, a config file or a flag holds, the agent
answers with its own validation error naming the field — never a crash of another kind.

Each property starts from a valid, feature-rich object and mutates it (a value replaced by any
JSON value, a key dropped, a key added), or feeds arbitrary text; hypothesis shrinks a failure
to the smallest input that shows it.
"""

from __future__ import annotations

import copy
import json
import os
import pathlib
import tempfile
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pykubelet.api.errors import InvalidObject
from pykubelet.api.pod import parse_pod, unsupported_fields
from pykubelet.config import ConfigError, Settings, build_parser, load_config_file, settings_from_args
from pykubelet.config.options import OPTIONS
from pykubelet.pods.admission import Allocatable, admit
from pykubelet.runtime.resources import linux_resources, pod_cgroup_resources, qos_class
from pykubelet.sources.static_files import ManifestError, read_manifest
from pykubelet.util.safe_remove import check_plain_name

# CI runs a fixed sample (derandomized: the same 300 inputs every run, so it never flakes);
# `HYPOTHESIS_PROFILE=soak` explores afresh with many more (make soak).
_QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large]
settings.register_profile("ci", max_examples=300, deadline=None, derandomize=True, database=None,
                          suppress_health_check=_QUIET)
settings.register_profile("soak", max_examples=5000, deadline=None, suppress_health_check=_QUIET)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

RICH_POD: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "web", "namespace": "default", "uid": "1b4e28ba-2fa1-11d2-883f-0016d3cca427",
                 "labels": {"app": "web"}, "annotations": {"note": "x"}},
    "spec": {
        "restartPolicy": "OnFailure", "terminationGracePeriodSeconds": 5, "hostname": "web", "subdomain": "s",
        "dnsPolicy": "ClusterFirst", "dnsConfig": {"nameservers": ["1.1.1.1"], "options": [{"name": "ndots", "value": "2"}]},
        "hostAliases": [{"ip": "10.0.0.1", "hostnames": ["db"]}],
        "securityContext": {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 2000, "supplementalGroups": [3000],
                            "sysctls": [{"name": "net.ipv4.ip_local_port_range", "value": "1024 65535"}]},
        "volumes": [{"name": "scratch", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}},
                    {"name": "host", "hostPath": {"path": "/tmp", "type": "Directory"}}],
        "initContainers": [{"name": "init", "image": "busybox:1.36", "command": ["true"]},
                           {"name": "side", "image": "busybox:1.36", "restartPolicy": "Always", "args": ["sleep", "9"]}],
        "containers": [{
            "name": "app", "image": "busybox:1.36", "imagePullPolicy": "IfNotPresent",
            "command": ["sh", "-c"], "args": ["echo $(GREETING); sleep 3600"], "workingDir": "/tmp",
            "ports": [{"name": "http", "containerPort": 80, "hostPort": 8080, "protocol": "TCP"}],
            "env": [{"name": "GREETING", "value": "hi"},
                    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}}],
            "resources": {"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"cpu": "1", "memory": "64Mi"}},
            "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"},
                             {"name": "host", "mountPath": "/host", "readOnly": True, "subPath": "x"}],
            "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http", "httpHeaders": [{"name": "A", "value": "b"}]},
                              "periodSeconds": 5, "failureThreshold": 3},
            "readinessProbe": {"tcpSocket": {"port": 80}, "initialDelaySeconds": 1},
            "startupProbe": {"exec": {"command": ["true"]}},
            "lifecycle": {"postStart": {"exec": {"command": ["true"]}}, "preStop": {"sleep": {"seconds": 1}}},
            "securityContext": {"capabilities": {"add": ["NET_ADMIN"], "drop": ["ALL"]},
                                "readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False},
            "terminationMessagePolicy": "FallbackToLogsOnError",
        }],
    },
}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2**63, max_value=2**64) | st.floats(allow_nan=True)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=12)


def _paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    """Every place in a JSON-like value: dict keys and list indexes, outermost first."""
    out = [prefix]
    if isinstance(obj, dict):
        for key, value in obj.items():
            out += _paths(value, prefix + (key,))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            out += _paths(value, prefix + (i,))
    return out


@st.composite
def mutated(draw, original: dict[str, Any]) -> dict[str, Any]:
    """The original with one to three places replaced, dropped or given an extra key."""
    doc = copy.deepcopy(original)
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        action = draw(st.sampled_from(["replace", "drop", "add"]))
        if action == "drop":
            del parent[path[-1]]
        elif action == "add" and isinstance(parent[path[-1]], dict):
            parent[path[-1]][draw(st.text(max_size=12))] = draw(json_values)
        else:
            parent[path[-1]] = draw(json_values)
    return doc


@given(mutated(RICH_POD))
def test_a_mutated_pod_is_a_pod_or_an_invalid_object_naming_fields(doc):
    try:
        parse_pod(doc, where="fuzz")
    except InvalidObject as e:
        assert e.errors and all(err.path for err in e.errors), e


@given(mutated(RICH_POD))
def test_a_mutated_pod_that_parses_goes_through_admission_and_resources_without_raising(doc):
    # What the agent does with every pod it is handed, before any worker runs: a pod the parser
    # lets through must not make these raise (in the agent that would end the source's loop).
    try:
        pod = parse_pod(doc, where="fuzz")
    except InvalidObject:
        return
    unsupported_fields(pod)
    admit(pod, [], "node", Allocatable(pods=110, cpu_millis=2000, memory_bytes=2**32))
    qos_class(pod)
    pod_cgroup_resources(pod)
    for container in (*pod.init_containers, *pod.containers):
        linux_resources(pod, container, 2**32)


@given(json_values)
def test_any_json_value_as_a_pod_is_an_invalid_object_or_a_pod(doc):
    try:
        parse_pod(doc, where="fuzz")
    except InvalidObject:
        pass


def test_the_rich_pod_itself_is_valid():
    pod = parse_pod(copy.deepcopy(RICH_POD), where="fuzz")  # else the mutations above prove little
    assert pod.name == "web" and len(pod.containers) == 1 and len(pod.init_containers) == 2


@given(st.one_of(st.binary(max_size=400),
                 mutated(RICH_POD).map(lambda d: yaml.safe_dump(d).encode()),
                 mutated(RICH_POD).map(lambda d: yaml.safe_dump(d).encode()[:-7])),  # a file cut short
       st.sampled_from(["web.yaml", "web.json"]))
def test_any_manifest_file_is_a_pod_or_a_manifest_error_naming_the_file(data, name):
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / name
        path.write_bytes(data)
        try:
            read_manifest(str(path), "node1")
        except ManifestError as e:
            assert str(path) in str(e)


@given(st.one_of(st.text(max_size=40), st.sampled_from(["..", ".", "../../x", "/x", "a/../b", "x/", "\x00"])),
       st.sampled_from(["metadata.uid", "spec.volumes[0].name"]))
def test_a_pod_that_parses_names_its_directories_with_plain_names_only(value, field):
    # The UID and the volume names become directory names under the root dir: whatever a manifest
    # puts there, a pod that parses can never make the agent write or remove outside them.
    doc = copy.deepcopy(RICH_POD)
    if field == "metadata.uid":
        doc["metadata"]["uid"] = value
    else:
        doc["spec"]["volumes"][0]["name"] = value
    try:
        pod = parse_pod(doc, where="fuzz")
    except InvalidObject as e:
        assert any(err.path == field or err.path.startswith("spec.containers") for err in e.errors), e
        return
    # An empty UID parses (static pods are given one from their content, API pods have theirs).
    for name in ((pod.uid,) if pod.uid else ()) + tuple(v.name for v in pod.volumes):
        check_plain_name(name)


CONFIG_FIELDS = sorted(o.field for o in OPTIONS if o.field)


@given(st.dictionaries(st.sampled_from(CONFIG_FIELDS) | st.text(max_size=12), json_values, max_size=6))
def test_any_kubelet_config_file_applies_or_is_a_config_error_naming_the_file_and_field(fields):
    doc = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", **fields}
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "kubelet.yaml"
        path.write_text(json.dumps(doc, default=str))
        try:
            load_config_file(str(path), Settings())
        except ConfigError as e:
            assert str(path) in str(e) and "field " in str(e), e


FLAGS = sorted(o.flag for o in OPTIONS if o.flag)


@given(st.lists(st.tuples(st.sampled_from(FLAGS), st.text(max_size=30).filter(lambda t: not t.startswith("-"))),
                max_size=5))
def test_any_flag_value_applies_or_is_a_config_error_naming_the_flag(flags):
    argv = [f"--{name}={value}" for name, value in flags] + ["--hostname-override=n1"]
    try:
        settings_from_args(build_parser().parse_args(argv))
    except ConfigError as e:
        assert any(f"--{name}" in str(e) for name, _ in flags), e
