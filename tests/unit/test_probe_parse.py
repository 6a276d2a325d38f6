"""Probes and lifecycle hooks are parsed into typed values and validated as the apiserver does:
a malformed one refuses the pod, naming the field with its path, instead of failing later in a
probe task nobody watches."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pykubelet.api.errors import InvalidObject
from pykubelet.api.pod import parse_pod
from pykubelet.api.probe import (ExecAction, GRPCAction, HTTPGetAction, HTTPHeader, LifecycleHandler, Probe,
                                 SleepAction, TCPSocketAction)
from pykubelet.api.probe_parse import recorded_handler

EXEC = {"exec": {"command": ["true"]}}


def pod(container: dict[str, Any] | None = None, init: dict[str, Any] | None = None,
        ephemeral: dict[str, Any] | None = None):
    spec: dict[str, Any] = {"containers": [{"name": "app", "image": "busybox", **(container or {})}]}
    if init is not None:
        spec["initContainers"] = [{"name": "init", "image": "busybox", **init}]
    if ephemeral is not None:
        spec["ephemeralContainers"] = [{"name": "debug", "image": "busybox", **ephemeral}]
    return parse_pod({"metadata": {"name": "web", "uid": "u1"}, "spec": spec}, where="web.yaml")


def errors_of(**kwargs: Any) -> list[str]:
    with pytest.raises(InvalidObject) as e:
        pod(**kwargs)
    return [str(err) for err in e.value.errors]


def test_a_period_that_is_not_an_integer_refuses_the_pod_naming_the_field_and_the_file():
    with pytest.raises(InvalidObject) as e:
        pod({"readinessProbe": {**EXEC, "periodSeconds": "abc"}})
    assert [err.path for err in e.value.errors] == ["spec.containers[0].readinessProbe.periodSeconds"]
    assert str(e.value).startswith('web.yaml: Pod "web" is invalid: spec.containers[0].readinessProbe.periodSeconds')


def test_probes_are_typed_with_the_api_defaults():
    c = pod({"livenessProbe": {"httpGet": {"port": "http", "httpHeaders": [{"name": "X-A", "value": "b"}]},
                               "terminationGracePeriodSeconds": 7},
             "readinessProbe": {"tcpSocket": {"port": 80}, "periodSeconds": 0, "successThreshold": 2},
             "startupProbe": {"grpc": {"port": 9000, "service": "s"}, "failureThreshold": 30},
             "ports": [{"name": "http", "containerPort": 8080}]}).containers[0]
    assert c.liveness_probe == Probe(HTTPGetAction(port="http", path="/", headers=(HTTPHeader("X-A", "b"),)),
                                     termination_grace_period_seconds=7)
    assert c.readiness_probe == Probe(TCPSocketAction(port=80), period_seconds=10, success_threshold=2)
    assert c.startup_probe == Probe(GRPCAction(port=9000, service="s"), failure_threshold=30)


@pytest.mark.parametrize("probe, field", [
    ({**EXEC, "periodSeconds": True}, "periodSeconds"),
    ({**EXEC, "timeoutSeconds": "1"}, "timeoutSeconds"),
    ({**EXEC, "initialDelaySeconds": -1}, "initialDelaySeconds"),
    ({**EXEC, "periodSeconds": -5}, "periodSeconds"),
    ({**EXEC, "failureThreshold": 1.5}, "failureThreshold"),
    ({**EXEC, "successThreshold": -1}, "successThreshold"),
    ({**EXEC, "terminationGracePeriodSeconds": 5}, "terminationGracePeriodSeconds"),  # not on readiness
    ({"exec": {"command": []}}, "exec.command"),
    ({"httpGet": {"port": 80, "scheme": "FTP"}}, "httpGet.scheme"),
    ({"httpGet": {"port": 0}}, "httpGet.port"),
    ({"httpGet": {"port": 65536}}, "httpGet.port"),
    ({"httpGet": {"port": "8080"}}, "httpGet.port"),  # a number in a string is no port name
    ({"httpGet": {"port": "Web"}}, "httpGet.port"),
    ({"httpGet": {"port": "a-very-long-port-name"}}, "httpGet.port"),
    ({"httpGet": {"port": "web--ui"}}, "httpGet.port"),
    ({"httpGet": {}}, "httpGet.port"),
    ({"httpGet": {"port": 80, "httpHeaders": [{"name": "bad header", "value": "x"}]}}, "httpGet.httpHeaders"),
    ({"tcpSocket": {"port": False}}, "tcpSocket.port"),
    ({"grpc": {"port": "grpc"}}, "grpc.port"),
    ({"grpc": {}}, "grpc.port"),
    ({"exec": {"command": ["a"]}, "tcpSocket": {"port": 80}}, "tcpSocket"),  # exactly one handler
    ({"periodSeconds": 5}, ""),  # no handler at all
    ({}, ""),
    ("probe", ""),
])
def test_each_bad_probe_field_is_named_with_its_path(probe, field):
    path = "spec.containers[0].readinessProbe" + (f".{field}" if field else "")
    assert any(e.startswith(f"{path}: ") for e in errors_of(container={"readinessProbe": probe})), path


@pytest.mark.parametrize("kind", ["livenessProbe", "startupProbe"])
def test_liveness_and_startup_need_a_success_threshold_of_one_and_a_positive_grace(kind):
    assert errors_of(container={kind: {**EXEC, "successThreshold": 2}}) == [
        f"spec.containers[0].{kind}.successThreshold: Invalid value: 2: must be 1"]
    assert errors_of(container={kind: {**EXEC, "terminationGracePeriodSeconds": 0}}) == [
        f"spec.containers[0].{kind}.terminationGracePeriodSeconds: Invalid value: 0: must be greater than 0"]
    assert pod({kind: {**EXEC, "successThreshold": 1}}).containers[0] is not None


def test_init_containers_probes_are_named_by_their_index_and_only_sidecars_may_have_them():
    assert errors_of(init={"restartPolicy": "Always", "startupProbe": {**EXEC, "periodSeconds": "x"}}) == [
        "spec.initContainers[0].startupProbe.periodSeconds: must be an integer, got 'x'"]
    sidecar = pod(init={"restartPolicy": "Always", "readinessProbe": EXEC}).init_containers[0]
    assert sidecar.readiness_probe == Probe(ExecAction(("true",)))
    assert errors_of(init={"livenessProbe": EXEC}) == [
        "spec.initContainers[0].livenessProbe: Forbidden: may not be set for init containers without "
        "restartPolicy=Always"]


def test_ephemeral_containers_take_no_probes():
    assert errors_of(ephemeral={"readinessProbe": {**EXEC, "periodSeconds": "abc"}}) == [
        "spec.ephemeralContainers[0].readinessProbe: Forbidden: cannot be set for an Ephemeral Container"]
    assert pod(ephemeral={}).ephemeral_containers[0].readiness_probe is None


def test_lifecycle_hooks_are_typed_and_validated():
    c = pod({"lifecycle": {"postStart": {"httpGet": {"port": 80, "path": "/up", "scheme": "HTTPS"}},
                           "preStop": {"sleep": {"seconds": 3}}}}).containers[0]
    assert c.post_start == LifecycleHandler(HTTPGetAction(port=80, path="/up", scheme="HTTPS"))
    assert c.pre_stop == LifecycleHandler(SleepAction(3))
    assert pod({"lifecycle": {"preStop": {"tcpSocket": {"port": 80}}}}).containers[0].pre_stop == \
        LifecycleHandler(TCPSocketAction(port=80))  # accepted, never run
    assert errors_of(container={"lifecycle": {"preStop": {"sleep": {"seconds": "5"}}}}) == [
        "spec.containers[0].lifecycle.preStop.sleep.seconds: must be an integer, got '5'"]
    assert errors_of(container={"lifecycle": {"postStart": {"grpc": {"port": 80}}}}) == [
        "spec.containers[0].lifecycle.postStart: Required value: must specify a handler type"]
    assert errors_of(container={"lifecycle": {"postStart": {"exec": {"command": "true"}}}}) == [
        "spec.containers[0].lifecycle.postStart.exec.command: must be a list, got str",
        "spec.containers[0].lifecycle.postStart.exec.command: Required value"]


def test_a_recorded_pre_stop_hook_reads_back_and_a_foreign_annotation_is_no_hook():
    for handler in (LifecycleHandler(ExecAction(("sh", "-c", "sleep 1"))), LifecycleHandler(SleepAction(2)),
                    LifecycleHandler(HTTPGetAction(port="web", path="/stop", host="10.0.0.1",
                                                   headers=(HTTPHeader("A", "b"),)))):
        assert recorded_handler(json.dumps(handler.to_dict())) == handler
    assert recorded_handler("") is None
    assert recorded_handler("{not json") is None
    assert recorded_handler('{"exec": {"command": []}}') is None
    assert recorded_handler('["exec"]') is None
