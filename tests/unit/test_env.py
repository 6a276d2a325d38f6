"""A container's environment, command and args as the kubelet builds them: values, $(VAR)
expansion, the downward API (fieldRef, resourceFieldRef) and the sources not supported yet."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from pykubelet.api.pod import Pod, parse_pod
from pykubelet.runtime.env import ContainerConfigError, EnvSources, PodFacts, container_env, expand, expand_command

FACTS = PodFacts(node_name="node-1", host_ip="192.168.1.10", pod_ip="10.88.0.7")
MI = 2**20
NODE_ALLOCATABLE = {"cpu": 4.0, "memory": float(8192 * MI)}


def make_pod(env: list[dict[str, Any]] | None = None, resources: dict[str, Any] | None = None,
             command: list[str] | None = None, args: list[str] | None = None,
             sidecar_resources: dict[str, Any] | None = None, spec: dict[str, Any] | None = None) -> Pod:
    app: dict[str, Any] = {"name": "app", "image": "busybox:1.36", "env": env or []}
    if resources is not None:
        app["resources"] = resources
    if command is not None:
        app["command"] = command
    if args is not None:
        app["args"] = args
    containers = [app]
    if sidecar_resources is not None:
        containers.append({"name": "sidecar", "image": "busybox:1.36", "resources": sidecar_resources})
    return parse_pod({"metadata": {"name": "web", "namespace": "shop", "uid": "uid-1",
                                   "labels": {"app": "web", "tier": "front"},
                                   "annotations": {"team": "payments"}},
                      "spec": {"containers": containers, **(spec or {})}}, where="test")


def env_of(pod: Pod, allocatable: dict[str, float] | None = None) -> dict[str, str]:
    pairs = container_env(pod, pod.containers[0], FACTS, NODE_ALLOCATABLE if allocatable is None else allocatable)
    return dict(pairs)


def one(value_from: dict[str, Any], **pod_args: Any) -> str:
    return env_of(make_pod([{"name": "X", "valueFrom": value_from}], **pod_args))["X"]


# --- $(VAR) expansion -----------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("$(A)", "alpha"),
    ("x-$(A)-y", "x-alpha-y"),
    ("$(A)$(B)", "alphabeta"),
    ("$(MISSING)", "$(MISSING)"),          # undefined: kept verbatim
    ("$(A) $(MISSING)", "alpha $(MISSING)"),
    ("$$", "$"),                            # escaped operator
    ("$$(A)", "$(A)"),                      # escaped reference stays literal
    ("$$$(A)", "$alpha"),
    ("cost: $5", "cost: $5"),               # a lone $ is not an operator
    ("$", "$"),
    ("$(A", "$(A"),                         # unterminated reference
    ("$()", "$()"),
    ("no references", "no references"),
    ("", ""),
])
def test_references_expand_like_the_api_documents(text, expected):
    assert expand(text, {"A": "alpha", "B": "beta"}) == expected


def test_plain_values_arrive_in_order():
    pod = make_pod([{"name": "A", "value": "1"}, {"name": "B", "value": "two"}, {"name": "EMPTY"}])
    assert container_env(pod, pod.containers[0], FACTS, NODE_ALLOCATABLE) == [("A", "1"), ("B", "two"), ("EMPTY", "")]


def test_a_value_can_refer_to_an_earlier_variable():
    pod = make_pod([{"name": "HOST", "value": "db"}, {"name": "PORT", "value": "5432"},
                    {"name": "URL", "value": "postgres://$(HOST):$(PORT)/app"}])
    assert env_of(pod)["URL"] == "postgres://db:5432/app"


def test_a_reference_to_a_later_variable_is_left_as_written():
    pod = make_pod([{"name": "URL", "value": "http://$(HOST)"}, {"name": "HOST", "value": "db"}])
    assert env_of(pod)["URL"] == "http://$(HOST)"


def test_a_value_can_refer_to_an_earlier_downward_api_variable():
    pod = make_pod([{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    {"name": "WHERE", "value": "running on $(NODE)"}])
    assert env_of(pod)["WHERE"] == "running on node-1"


def test_escaped_reference_in_a_value_stays_literal():
    pod = make_pod([{"name": "A", "value": "x"}, {"name": "B", "value": "$$(A) is $(A)"}])
    assert env_of(pod)["B"] == "$(A) is x"


def test_command_and_args_expand_from_the_environment():
    pod = make_pod([{"name": "GREETING", "value": "hello"}, {"name": "WHO", "value": "world"}],
                   command=["sh", "-c", "echo $(GREETING)"], args=["$(WHO)", "$$(WHO)", "$(NOPE)"])
    env = container_env(pod, pod.containers[0], FACTS, NODE_ALLOCATABLE)
    assert expand_command(pod.containers[0], env) == (["sh", "-c", "echo hello"], ["world", "$(WHO)", "$(NOPE)"])


def test_command_without_references_is_unchanged():
    pod = make_pod(command=["sleep"], args=["3600"])
    assert expand_command(pod.containers[0], []) == (["sleep"], ["3600"])


# --- fieldRef ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("field_path, expected", [
    ("metadata.name", "web"),
    ("metadata.namespace", "shop"),
    ("metadata.uid", "uid-1"),
    ("metadata.labels['app']", "web"),
    ("metadata.labels['tier']", "front"),
    ("metadata.annotations['team']", "payments"),
    ("metadata.labels['absent']", ""),
    ("spec.nodeName", "node-1"),
    ("spec.serviceAccountName", "builder"),
    ("status.hostIP", "192.168.1.10"),
    ("status.podIP", "10.88.0.7"),
])
def test_field_ref_gives_the_pods_own_facts(field_path, expected):
    assert one({"fieldRef": {"fieldPath": field_path}}, spec={"serviceAccountName": "builder"}) == expected


def test_service_account_name_is_empty_when_the_spec_has_none():
    assert one({"fieldRef": {"fieldPath": "spec.serviceAccountName"}}) == ""


@pytest.mark.parametrize("field_path", ["spec.hostname", "metadata.generateName", "status.phase", ""])
def test_unsupported_field_path_is_a_config_error_naming_it(field_path):
    with pytest.raises(ContainerConfigError) as caught:
        one({"fieldRef": {"fieldPath": field_path}})
    assert repr(field_path) in str(caught.value)


# --- resourceFieldRef --------------------------------------------------------------------------------

LIMITED = {"requests": {"cpu": "250m", "memory": "64Mi"}, "limits": {"cpu": "500m", "memory": "128Mi"}}


@pytest.mark.parametrize("resource, divisor, expected", [
    ("limits.cpu", "1m", "500"),
    ("limits.cpu", "1", "1"),        # rounded up to whole cores
    ("limits.cpu", None, "1"),       # divisor defaults to 1
    ("requests.cpu", "1m", "250"),
    ("requests.cpu", "1", "1"),
    ("limits.memory", "1Mi", "128"),
    ("limits.memory", None, str(128 * MI)),
    ("limits.memory", "1Gi", "1"),   # rounded up
    ("requests.memory", "1Mi", "64"),
    ("requests.memory", "1Ki", str(64 * 1024)),
])
def test_resource_field_ref_reports_the_containers_resources(resource, divisor, expected):
    ref: dict[str, Any] = {"resource": resource}
    if divisor is not None:
        ref["divisor"] = divisor
    assert one({"resourceFieldRef": ref}, resources=LIMITED) == expected


@pytest.mark.parametrize("limit, divisor, expected", [
    ("4001m", "1m", "4001"),   # 4.001 / 0.001 in binary floating point is 4001.0000000000005
    ("4.009", "1m", "4009"),
    ("0", "1m", "0"),
])
def test_resource_field_ref_counts_millicores_exactly(limit, divisor, expected):
    ref = {"resource": "limits.cpu", "divisor": divisor}
    assert one({"resourceFieldRef": ref}, resources={"limits": {"cpu": limit}}) == expected


def test_zero_divisor_means_the_default_divisor():
    """The API treats divisor 0 as unset (validation accepts it; the kubelet then divides by 1)."""
    ref = {"resource": "limits.memory", "divisor": "0"}
    assert one({"resourceFieldRef": ref}, resources=LIMITED) == str(128 * MI)


@pytest.mark.parametrize("resource, divisor, expected", [
    ("limits.cpu", "1m", "4000"),
    ("limits.cpu", "1", "4"),
    ("limits.memory", "1Mi", "8192"),
])
def test_without_a_limit_the_node_allocatable_is_reported(resource, divisor, expected):
    ref = {"resource": resource, "divisor": divisor}
    assert one({"resourceFieldRef": ref}, resources={"requests": {"cpu": "100m", "memory": "16Mi"}}) == expected


def test_without_a_request_or_limit_the_request_is_zero():
    assert one({"resourceFieldRef": {"resource": "requests.cpu", "divisor": "1m"}}) == "0"


@pytest.mark.parametrize("resource, divisor, expected", [
    ("requests.cpu", "1m", "500"),
    ("requests.memory", "1Mi", "128"),
])
def test_a_missing_request_reads_as_the_limit_as_the_api_defaults_it(resource, divisor, expected):
    """The API defaults an unset request to the limit, so the downward API reports the limit."""
    ref = {"resource": resource, "divisor": divisor}
    assert one({"resourceFieldRef": ref}, resources={"limits": {"cpu": "500m", "memory": "128Mi"}}) == expected


def test_container_name_reports_another_containers_resources():
    ref = {"containerName": "sidecar", "resource": "limits.memory", "divisor": "1Mi"}
    assert one({"resourceFieldRef": ref}, resources=LIMITED, sidecar_resources={"limits": {"memory": "32Mi"}}) == "32"


def test_container_name_not_in_the_pod_is_a_config_error_naming_it():
    with pytest.raises(ContainerConfigError) as caught:
        one({"resourceFieldRef": {"containerName": "ghost", "resource": "limits.cpu"}})
    assert "'ghost'" in str(caught.value)


@pytest.mark.parametrize("resource", ["limits.gpu", "requests.pods", "cpu", "limits"])
def test_unsupported_resource_is_a_config_error_naming_it(resource):
    with pytest.raises(ContainerConfigError) as caught:
        one({"resourceFieldRef": {"resource": resource}}, resources=LIMITED)
    assert repr(resource) in str(caught.value)


# --- ConfigMaps, Secrets, envFrom and service links ---------------------------------------------

def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


SETTINGS = {"metadata": {"name": "settings"}, "data": {"mode": "fast", "1bad": "x", "level": "3"}}
DB = {"metadata": {"name": "db"}, "data": {"password": b64("s3cret"), "user": b64("admin")}}


def sourced(env: list[dict[str, Any]], env_from: list[dict[str, Any]] | None = None,
            sources: EnvSources | None = None) -> list[tuple[str, str]]:
    pod = make_pod(env)
    if env_from is not None:
        pod.containers[0].raw["envFrom"] = env_from
    sources = sources or EnvSources({"settings": SETTINGS, "gone": None}, {"db": DB, "nope": None}, has_api=True)
    return container_env(pod, pod.containers[0], FACTS, NODE_ALLOCATABLE, sources)


@pytest.mark.parametrize("value_from, expected", [
    ({"configMapKeyRef": {"name": "settings", "key": "mode"}}, "fast"),
    ({"secretKeyRef": {"name": "db", "key": "password"}}, "s3cret"),
])
def test_key_refs_read_the_object(value_from, expected):
    assert dict(sourced([{"name": "X", "valueFrom": value_from}]))["X"] == expected


@pytest.mark.parametrize("value_from, message", [
    ({"configMapKeyRef": {"name": "gone", "key": "mode"}}, 'configmap "gone" not found'),
    ({"secretKeyRef": {"name": "nope", "key": "password"}}, 'secret "nope" not found'),
    ({"configMapKeyRef": {"name": "settings", "key": "missing"}},
     "couldn't find key missing in ConfigMap shop/settings"),
    ({"secretKeyRef": {"name": "db", "key": "missing"}}, "couldn't find key missing in Secret shop/db"),
])
def test_missing_object_or_key_is_the_kubelets_config_error(value_from, message):
    with pytest.raises(ContainerConfigError) as caught:
        sourced([{"name": "X", "valueFrom": value_from}])
    assert str(caught.value) == message


@pytest.mark.parametrize("ref", [{"name": "gone", "key": "mode"}, {"name": "settings", "key": "missing"}])
def test_optional_missing_reference_leaves_the_variable_unset(ref):
    assert "X" not in dict(sourced([{"name": "X", "valueFrom": {"configMapKeyRef": {**ref, "optional": True}}}]))


@pytest.mark.parametrize("value_from, message", [
    ({"configMapKeyRef": {"name": "settings", "key": "mode"}},
     "couldn't get configMap shop/settings, no kubeClient defined"),
    ({"secretKeyRef": {"name": "db", "key": "password"}}, "couldn't get secret shop/db, no kubeClient defined"),
])
def test_without_an_apiserver_a_reference_is_a_config_error_naming_it(value_from, message):
    with pytest.raises(ContainerConfigError) as caught:
        one(value_from)
    assert str(caught.value) == message


def test_env_from_with_prefix_then_env_overrides():
    env = sourced([{"name": "CFG_mode", "value": "slow"}, {"name": "URL", "value": "$(DB_user)@$(CFG_level)"}],
                  [{"configMapRef": {"name": "settings"}, "prefix": "CFG_"},
                   {"secretRef": {"name": "db"}, "prefix": "DB_"},
                   {"configMapRef": {"name": "absent-but-optional", "optional": True}}],
                  EnvSources({"settings": SETTINGS, "absent-but-optional": None}, {"db": DB}, has_api=True))
    values = dict(env)
    # Keys are not checked as names: the API validated them (the kubelet no longer skips any).
    assert values["CFG_mode"] == "slow" and values["CFG_level"] == "3" and values["CFG_1bad"] == "x"
    assert values["DB_password"] == "s3cret"
    assert values["URL"] == "admin@3"


def test_env_from_missing_object_is_a_config_error():
    with pytest.raises(ContainerConfigError) as caught:
        sourced([], [{"secretRef": {"name": "nope"}}])
    assert str(caught.value) == 'secret "nope" not found'


def test_service_variables_come_last_and_can_be_referenced():
    sources = EnvSources(services={"WEB_SERVICE_HOST": "10.96.0.5", "WEB_SERVICE_PORT": "80"}, has_api=True)
    env = sourced([{"name": "WEB_SERVICE_PORT", "value": "8080"}, {"name": "URL", "value": "$(WEB_SERVICE_HOST)"}],
                  sources=sources)
    assert env == [("WEB_SERVICE_PORT", "8080"), ("URL", "10.96.0.5"), ("WEB_SERVICE_HOST", "10.96.0.5")]
