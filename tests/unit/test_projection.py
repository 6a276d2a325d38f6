"""configMap/secret/downwardAPI payloads, service link variables, token refresh timing and the
references a pod makes: the pure logic behind the apiserver-backed volumes and env."""

from __future__ import annotations

import base64

import pytest

from pykubelet.api.pod import parse_pod
from pykubelet.api.references import referenced_names, static_pod_api_reference
from pykubelet.kube.tokens import Token, requires_refresh
from pykubelet.runtime.service_env import service_env, services_for_pod
from pykubelet.volumes.atomic_writer import FileProjection
from pykubelet.volumes.projection import MountError, downward_api_payload, format_map, go_quote, object_payload

CM = {"metadata": {"name": "cfg"}, "data": {"a.txt": "alpha", "b.txt": "beta"},
      "binaryData": {"bin": base64.b64encode(b"\x00\x01").decode()}}
SECRET = {"metadata": {"name": "s"}, "data": {"password": base64.b64encode(b"hunter2").decode()}}


def test_without_items_every_key_is_a_file_with_the_default_mode():
    assert object_payload("configmap", CM, None, 0o644, False) == {
        "a.txt": FileProjection(b"alpha", 0o644), "b.txt": FileProjection(b"beta", 0o644),
        "bin": FileProjection(b"\x00\x01", 0o644)}
    assert object_payload("secret", SECRET, None, 0o400, False) == {"password": FileProjection(b"hunter2", 0o400)}


def test_items_map_keys_to_paths_with_their_own_mode():
    items = [{"key": "a.txt", "path": "conf/a"}, {"key": "b.txt", "path": "b", "mode": 0o600}]
    assert object_payload("configmap", CM, items, 0o644, False) == {
        "conf/a": FileProjection(b"alpha", 0o644), "b": FileProjection(b"beta", 0o600)}


@pytest.mark.parametrize("kind, obj, message", [
    ("configmap", CM, "configmap references non-existent config key: nope"),
    ("secret", SECRET, "references non-existent secret key: nope"),
])
def test_a_missing_listed_key_fails_unless_optional(kind, obj, message):
    items = [{"key": "nope", "path": "x"}]
    with pytest.raises(MountError) as caught:
        object_payload(kind, obj, items, 0o644, False)
    assert str(caught.value) == message
    assert object_payload(kind, obj, items, 0o644, True) == {}


def test_an_optional_missing_object_gives_no_files():
    assert object_payload("configmap", None, [{"key": "a", "path": "a"}], 0o644, True) == {}


def pod_with_labels(labels, annotations=None):
    return parse_pod({"metadata": {"name": "web", "namespace": "shop", "uid": "u1", "labels": labels,
                                   "annotations": annotations or {}},
                      "spec": {"containers": [{"name": "app", "image": "busybox",
                                               "resources": {"limits": {"memory": "64Mi", "cpu": "250m"}}}]}}, "t")


def test_downward_api_files_follow_the_kubelets_format():
    pod = pod_with_labels({"tier": "front", "app": "web"}, {"note": 'say "hi"\n'})
    items = [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
             {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}, "mode": 0o600},
             {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
             {"path": "app", "fieldRef": {"fieldPath": "metadata.labels['app']"}},
             {"path": "mem", "resourceFieldRef": {"containerName": "app", "resource": "limits.memory",
                                                  "divisor": "1Mi"}},
             {"path": "cpu", "resourceFieldRef": {"containerName": "app", "resource": "limits.cpu"}}]
    payload = downward_api_payload(pod, items, 0o644, {"cpu": 2.0, "memory": 2**30})
    assert payload["labels"] == FileProjection(b'app="web"\ntier="front"', 0o644)
    assert payload["annotations"] == FileProjection(b'note="say \\"hi\\"\\n"', 0o600)
    assert payload["name"].data == b"web" and payload["app"].data == b"web"
    assert payload["mem"].data == b"64" and payload["cpu"].data == b"1"


def test_go_quote_escapes_like_go():
    assert go_quote('a"b\\c\td\x01é') == '"a\\"b\\\\c\\td\\x01é"'
    assert format_map({}) == ""


def svc(namespace, name, ip, *ports):
    return {"metadata": {"namespace": namespace, "name": name}, "spec": {"clusterIP": ip, "ports": list(ports)}}


def test_service_link_variables_have_the_docker_link_names():
    env = service_env([svc("shop", "redis-main", "10.96.0.11", {"name": "client", "port": 6379, "protocol": "TCP"},
                           {"port": 9121, "protocol": "UDP"})])
    assert env == {
        "REDIS_MAIN_SERVICE_HOST": "10.96.0.11", "REDIS_MAIN_SERVICE_PORT": "6379",
        "REDIS_MAIN_SERVICE_PORT_CLIENT": "6379",
        "REDIS_MAIN_PORT": "tcp://10.96.0.11:6379",
        "REDIS_MAIN_PORT_6379_TCP": "tcp://10.96.0.11:6379", "REDIS_MAIN_PORT_6379_TCP_PROTO": "tcp",
        "REDIS_MAIN_PORT_6379_TCP_PORT": "6379", "REDIS_MAIN_PORT_6379_TCP_ADDR": "10.96.0.11",
        "REDIS_MAIN_PORT_9121_UDP": "udp://10.96.0.11:9121", "REDIS_MAIN_PORT_9121_UDP_PROTO": "udp",
        "REDIS_MAIN_PORT_9121_UDP_PORT": "9121", "REDIS_MAIN_PORT_9121_UDP_ADDR": "10.96.0.11",
    }


def test_ipv6_addresses_are_bracketed_in_urls():
    env = service_env([svc("shop", "web", "fd00::1", {"port": 80})])
    assert env["WEB_PORT"] == "tcp://[fd00::1]:80" and env["WEB_SERVICE_HOST"] == "fd00::1"


def test_services_for_a_pod_are_its_namespaces_plus_the_master_service():
    services = [svc("default", "kubernetes", "10.96.0.1", {"port": 443}), svc("shop", "web", "10.96.0.2"),
                svc("other", "db", "10.96.0.3"), svc("shop", "headless", "None"), svc("shop", "pending", "")]
    names = lambda chosen: [s["metadata"]["name"] for s in chosen]  # noqa: E731
    assert names(services_for_pod(services, "shop", True)) == ["kubernetes", "web"]
    assert names(services_for_pod(services, "shop", False)) == ["kubernetes"]
    # A service named kubernetes in the pod's own namespace wins.
    own = svc("shop", "kubernetes", "10.96.0.9")
    assert services_for_pod([*services, own], "shop", True)[0] is own


def test_tokens_are_refreshed_after_80_percent_of_their_lifetime():
    token = Token("t", expires_at=10_000.0, expiration_seconds=3600)  # issued at 6400
    assert not requires_refresh(token, 6400 + 0.79 * 3600)
    assert requires_refresh(token, 6400 + 0.81 * 3600)
    assert requires_refresh(token, 6400 + 0.79 * 3600, jitter=10 + 0.01 * 3600)


def test_long_lived_tokens_are_refreshed_after_24_hours():
    year = 365 * 24 * 3600
    token = Token("t", expires_at=float(year), expiration_seconds=year)  # issued at 0
    assert not requires_refresh(token, 23 * 3600)
    assert requires_refresh(token, 24 * 3600 + 1)


API_POD = {"metadata": {"name": "p"}, "spec": {
    "imagePullSecrets": [{"name": "pull"}],
    "containers": [{"name": "c", "image": "i",
                    "env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cm-env", "key": "k"}}}],
                    "envFrom": [{"secretRef": {"name": "sec-env"}}]}],
    "volumes": [{"name": "v1", "configMap": {"name": "cm-vol"}}, {"name": "v2", "secret": {"secretName": "sec-vol"}},
                {"name": "v3", "projected": {"sources": [{"configMap": {"name": "kube-root-ca.crt"}},
                                                         {"serviceAccountToken": {"path": "token"}}]}}]}}


def test_referenced_names_cover_env_env_from_volumes_and_projections():
    assert referenced_names(API_POD) == {"configmaps": {"cm-env", "cm-vol", "kube-root-ca.crt"},
                                         "secrets": {"pull", "sec-env", "sec-vol"}}


@pytest.mark.parametrize("spec, expected", [
    ({"serviceAccountName": "default"}, ("serviceaccounts", "spec.serviceAccountName")),
    ({"volumes": [{"name": "v", "configMap": {"name": "x"}}]}, ("configmaps", "spec.volumes[0].configMap")),
    ({"volumes": [{"name": "v", "projected": {"sources": [{"downwardAPI": {}}, {"serviceAccountToken": {}}]}}]},
     ("serviceaccounts (via projected volumes)", "spec.volumes[0].projected.sources[1].serviceAccountToken")),
    ({"volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "x"}}]},
     ("persistentvolumeclaims", "spec.volumes[0].persistentVolumeClaim")),
    ({"volumes": [{"name": "v", "downwardAPI": {}}, {"name": "e", "emptyDir": {}}]}, None),
])
def test_static_pods_may_not_reference_api_objects(spec, expected):
    raw = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}], **spec}}
    assert static_pod_api_reference(raw) == expected


def test_a_secret_reference_is_named_before_a_configmap_one():
    assert static_pod_api_reference({**API_POD, "spec": {**API_POD["spec"]}}) == ("secrets", "spec.imagePullSecrets[0]")


def test_the_static_pod_source_refuses_a_manifest_naming_file_and_field(tmp_path):
    import yaml

    from pykubelet.sources.static_files import ManifestError, read_manifest

    path = tmp_path / "web.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"}, "spec": {
        "containers": [{"name": "c", "image": "busybox", "env": [
            {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "k"}}}]}]}}))
    with pytest.raises(ManifestError) as caught:
        read_manifest(str(path), "node1")
    assert str(caught.value) == (f"{path}: static pods may not reference configmaps "
                                 "(spec.containers[0].env[0].valueFrom.configMapKeyRef)")


class FakeTokenApi:
    """Answers TokenRequests like the apiserver: a new token each time, or an error."""

    def __init__(self, clock):
        self.clock = clock
        self.requests: list[tuple[str, dict]] = []
        self.fail = False

    async def create(self, path, body):
        from datetime import datetime, timezone

        from pykubelet.kube import errors

        self.requests.append((path, body))
        if self.fail:
            raise errors.Unreachable("POST", path, 0, "ClientConnectorError", "connection refused")
        expires = datetime.fromtimestamp(self.clock() + body["spec"]["expirationSeconds"], timezone.utc)
        return {"spec": body["spec"], "status": {"token": f"token-{len(self.requests)}",
                                                 "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ")}}


async def test_token_manager_caches_refreshes_and_rides_out_a_failed_refresh():
    from pykubelet.kube import errors
    from pykubelet.kube.tokens import TokenManager

    now = [1_000_000.0]
    api = FakeTokenApi(lambda: now[0])
    tokens = TokenManager(api, clock=lambda: now[0])  # type: ignore[arg-type]

    first = await tokens.get("shop", "default", "web", "uid-1", "", 3600)
    path, body = api.requests[0]
    assert path == "/api/v1/namespaces/shop/serviceaccounts/default/token"
    assert body["spec"]["boundObjectRef"] == {"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": "uid-1"}
    assert "audiences" not in body["spec"]
    now[0] += 0.5 * 3600
    assert await tokens.get("shop", "default", "web", "uid-1", "", 3600) == first and len(api.requests) == 1

    now[0] += 0.35 * 3600  # 85% of its lifetime: refresh; a failure keeps the still-valid token
    api.fail = True
    assert await tokens.get("shop", "default", "web", "uid-1", "", 3600) == first
    api.fail = False
    assert await tokens.get("shop", "default", "web", "uid-1", "", 3600) != first

    await tokens.get("shop", "default", "web", "uid-1", "vault", 3600)
    assert api.requests[-1][1]["spec"]["audiences"] == ["vault"]
    tokens.forget("uid-1")
    now[0] += 2 * 3600  # expired and nothing cached: the error reaches the caller
    api.fail = True
    with pytest.raises(errors.KubeError):
        await tokens.get("shop", "default", "web", "uid-1", "", 3600)


@pytest.mark.parametrize("pod_ctx, contexts, expected", [
    ({}, [{}, {}], None),
    ({"runAsUser": 1000}, [{}, {}], 1000),
    ({}, [{"runAsUser": 1000}, {"runAsUser": 1000}], 1000),
    ({"runAsUser": 1000}, [{}, {"runAsUser": 2000}], None),   # two users: no single owner
    ({}, [{"runAsUser": 1000}, {}], None),                      # one runs as the image's user
])
def test_token_files_belong_to_the_one_user_all_containers_run_as(pod_ctx, contexts, expected):
    from pykubelet.volumes.api import fs_user_of

    containers = [{"name": f"c{i}", "image": "i", "securityContext": ctx} for i, ctx in enumerate(contexts)]
    pod = parse_pod({"metadata": {"name": "p"}, "spec": {"securityContext": pod_ctx, "containers": containers}}, "t")
    assert fs_user_of(pod) == expected
