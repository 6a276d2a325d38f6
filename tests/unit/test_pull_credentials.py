"""Image pull credentials as the kubelet finds them: image pull Secrets parsed, matched to the
image by registry host and path, tried in order until a pull succeeds."""

from __future__ import annotations

import base64
import json

import pytest

from pykubelet.api.pod import Container, Pod
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.kube.objects import ObjectNotFound
from pykubelet.runtime.credentials.docker_config import Credential, DockerConfigError, decode_auth, secret_entries
from pykubelet.runtime.credentials.image_refs import ImageNameError, repository
from pykubelet.runtime.credentials.keyring import Keyring, urls_match
from pykubelet.runtime.credentials.node_config import NodeDockerConfig, read_node_entries
from pykubelet.runtime.credentials.pull_credentials import PullCredentials
from pykubelet.runtime.images import ERR_IMAGE_PULL, ImageError, ImageManager
from pykubelet.util.backoff import Backoff
from tests.fakes.runtime import FakeRuntime


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def pull_secret(name: str, auths: dict, kind: str = "kubernetes.io/dockerconfigjson", namespace: str = "default"):
    key = ".dockerconfigjson" if kind == "kubernetes.io/dockerconfigjson" else ".dockercfg"
    doc = {"auths": auths} if key == ".dockerconfigjson" else auths
    return {"metadata": {"name": name, "namespace": namespace}, "type": kind,
            "data": {key: b64(json.dumps(doc))}}


@pytest.mark.parametrize("image, repo", [
    ("busybox", "docker.io/library/busybox"),
    ("busybox:1.37", "docker.io/library/busybox"),
    ("team/app", "docker.io/team/app"),
    ("docker.io/busybox", "docker.io/library/busybox"),
    ("index.docker.io/team/app:v1", "docker.io/team/app"),
    ("127.0.0.1:5000/private/app:v1", "127.0.0.1:5000/private/app"),
    ("localhost/app@sha256:" + "a" * 64, "localhost/app"),
    ("Registry.Example.com/app", "Registry.Example.com/app"),
])
def test_repository_is_normalized_as_the_kubelet_looks_it_up(image, repo):
    assert repository(image) == repo


@pytest.mark.parametrize("image", ["Busybox", "team/App", "a" * 64, "busybox:", "example.com/a//b"])
def test_an_invalid_image_name_is_refused(image):
    with pytest.raises(ImageNameError, match="couldn't parse image name"):
        repository(image)


@pytest.mark.parametrize("glob, target, matches", [
    ("registry.example.com", "registry.example.com/app", True),
    ("*.example.com", "a.example.com/app", True),
    ("*.example.com", "a.b.example.com/app", False),  # as many labels as the key
    ("*.example.com", "example.com/app", False),
    ("registry.example.com:5000", "registry.example.com/app", False),  # ports must be equal
    ("registry.example.com", "registry.example.com:5000/app", False),
    ("127.0.0.1:5000", "127.0.0.1:5000/private/app", True),
    ("quay.io/team", "quay.io/team/app", True),
    ("quay.io/team", "quay.io/other/app", False),
    ("reg?.example.com", "reg1.example.com/x", False),  # "?" begins a URL query, as for the kubelet
    ("r[ab].example.com", "rb.example.com/x", True),
    ("r[ab].example.com", "rc.example.com/x", False),
    ("r[a.example.com", "ra.example.com/x", False),  # a malformed glob matches nothing
    ("[ab].example.com", "b.example.com/x", False),  # no URL: "[" begins an IPv6 address
    ("r^.example.com", "r^.example.com/x", False),  # no URL: "^" cannot be in a host
])
def test_keys_match_by_host_labels_port_and_path_prefix(glob, target, matches):
    assert urls_match(glob, target) is matches


def test_every_matching_key_contributes_most_specific_first():
    keyring = Keyring([("quay.io", Credential("host", "p1")), ("https://quay.io/team", Credential("team", "p2")),
                       ("quay.io", Credential("host-2", "p3")), ("gcr.io", Credential("other", "p4"))])
    assert [c.username for c in keyring.lookup("quay.io/team/app")] == ["team", "host", "host-2"]
    assert [c.username for c in keyring.lookup("quay.io/else/app")] == ["host", "host-2"]
    assert keyring.lookup("example.com/app") == []


@pytest.mark.parametrize("key", ["https://index.docker.io/v1/", "index.docker.io", "docker.io"])
def test_docker_hub_images_use_the_hub_entry_whatever_its_spelling(key):
    keyring = Keyring([(key, Credential("hub", "pw"))])
    for image in ("busybox", "team/app:v1", "docker.io/team/app", "index.docker.io/library/busybox"):
        assert [c.username for c in keyring.lookup(repository(image))] == ["hub"], image
    assert keyring.lookup(repository("quay.io/team/app")) == []


def test_a_dockerconfigjson_secret_gives_its_entries_auth_winning_over_username():
    secret = pull_secret("regcred", {
        "registry.example.com": {"username": "ignored", "password": "ignored", "auth": b64("alice:s3:cret")},
        "other.example.com": {"Username": "bob", "PASSWORD": "pw"},  # Go's JSON matches names in any case
        "unpadded.example.com": {"auth": b64("carol:pw").rstrip("=")},
    })
    entries = secret_entries(secret)
    assert [(k, c.username, c.password) for k, c in entries] == [
        ("registry.example.com", "alice", "s3:cret"), ("other.example.com", "bob", "pw"),
        ("unpadded.example.com", "carol", "pw")]
    assert entries[0][1].source == 'secret "default/regcred"'
    assert "s3:cret" not in repr(entries[0][1])


def test_a_dockercfg_secret_and_secrets_of_other_types():
    assert [(k, c.username) for k, c in secret_entries(
        pull_secret("old", {"registry.example.com": {"auth": b64("dave:pw")}}, kind="kubernetes.io/dockercfg"))] == [
        ("registry.example.com", "dave")]
    opaque = pull_secret("x", {})
    opaque["type"] = "Opaque"
    assert secret_entries(opaque) is None
    wrong_key = {"type": "kubernetes.io/dockercfg", "data": {".dockerconfigjson": b64("{}")}}
    assert secret_entries(wrong_key) is None


@pytest.mark.parametrize("data, field", [
    (b64("not json"), "data[.dockerconfigjson]: not base64-encoded JSON"),
    ("%%%", "data[.dockerconfigjson]: not base64-encoded JSON"),
    (b64('{"auths": []}'), "data[.dockerconfigjson].auths: must be an object"),
    (b64('{"auths": {"r.io": {"username": 7}}}'), 'data[.dockerconfigjson].auths["r.io"].username: must be a string'),
    (b64('{"auths": {"r.io": {"auth": "%%%%"}}}'), 'data[.dockerconfigjson].auths["r.io"].auth: illegal base64'),
    (b64('{"auths": {"r.io": {"auth": "' + b64("no-colon-secret") + '"}}}'),
     'data[.dockerconfigjson].auths["r.io"].auth: unable to parse auth field'),
])
def test_a_bad_pull_secret_is_an_error_naming_the_secret_and_field_not_the_credential(data, field):
    secret = {"metadata": {"name": "bad", "namespace": "ns"}, "type": "kubernetes.io/dockerconfigjson",
              "data": {".dockerconfigjson": data}}
    with pytest.raises(DockerConfigError) as e:
        secret_entries(secret)
    assert str(e.value).startswith('secret "ns/bad": ') and field in str(e.value)
    assert "no-colon-secret" not in str(e.value)


def test_auth_decodes_padded_and_unpadded():
    assert decode_auth(b64("u:p")) == ("u", "p")
    assert decode_auth(b64("user:pa").rstrip("=")) == ("user", "pa")
    with pytest.raises(ValueError, match="illegal base64"):
        decode_auth(b64("user:pa")[:-1])  # padded, but not enough: Go's decoder refuses it too


class Objects:
    def __init__(self, *secrets):
        self.secrets = {s["metadata"]["name"]: s for s in secrets}

    async def get(self, resource, namespace, name):
        assert resource == "secrets"
        if name not in self.secrets:
            raise ObjectNotFound(f'secret "{name}" not found')
        return self.secrets[name]


PRIVATE = "registry.example.com:5000/private/app:v1"


def make_pod(*secret_names: str) -> Pod:
    container = Container(name="app", image=PRIVATE, image_pull_policy="Always")
    return Pod(name="p", namespace="default", uid="u1", containers=(container,),
               raw={"spec": {"imagePullSecrets": [{"name": n} for n in secret_names]}})


async def ensure(runtime: FakeRuntime, objects: Objects, pod: Pod):
    events, warnings = [], []
    manager = ImageManager(runtime, Backoff(clock=runtime.clock), PullCredentials(objects))
    try:
        ref = await manager.ensure(pod.containers[0], api.PodSandboxConfig(), pod,
                                   lambda kind, reason, message: events.append((reason, message)),
                                   warn_pod=lambda reason, message: warnings.append((reason, message)))
    except ImageError as e:
        return e, events, warnings
    return ref, events, warnings


@pytest.fixture
def runtime():
    runtime = FakeRuntime(clock=lambda: 1000.0)
    runtime.private[PRIVATE] = ("alice", "right")
    return runtime


async def test_the_pull_carries_the_matching_secrets_credentials_in_order(runtime):
    objects = Objects(pull_secret("stale", {"registry.example.com:5000": {"username": "alice", "password": "old"}}),
                      pull_secret("fresh", {"registry.example.com:5000/private": {"username": "alice",
                                                                                  "password": "right"},
                                            "elsewhere.io": {"username": "eve", "password": "x"}}))
    ref, events, warnings = await ensure(runtime, objects, make_pod("stale", "fresh"))
    assert isinstance(ref, str) and ref
    # The more specific key first: it works, so the other one is never tried.
    assert [(a.username, a.password) for _, a in runtime.pulls] == [("alice", "right")]
    assert warnings == []


async def test_each_credential_is_tried_and_all_failures_reported_without_an_anonymous_try(runtime):
    objects = Objects(pull_secret("one", {"registry.example.com:5000": {"username": "alice", "password": "a"}}),
                      pull_secret("two", {"*.example.com:5000": {"username": "bob", "password": "b"}}))
    error, events, _ = await ensure(runtime, objects, make_pod("one", "two"))
    assert isinstance(error, ImageError) and error.reason == ERR_IMAGE_PULL
    assert [a.username for _, a in runtime.pulls] == ["alice", "bob"]  # reverse lexical order of the keys
    assert "401 Unauthorized" in error.message
    assert ("Failed", error.message) in events and "a" != error.message


async def test_without_a_secret_the_private_image_fails_to_pull_anonymously(runtime):
    error, events, _ = await ensure(runtime, Objects(), make_pod())
    assert isinstance(error, ImageError) and error.reason == ERR_IMAGE_PULL
    assert runtime.pulls == [(PRIVATE, None)]
    assert error.message == f'Failed to pull image "{PRIVATE}": failed to pull and unpack image "{PRIVATE}": ' \
                            "401 Unauthorized"


async def test_a_missing_secret_is_skipped_with_the_kubelets_warning(runtime):
    objects = Objects(pull_secret("there", {"registry.example.com:5000": {"username": "alice", "password": "right"}}))
    ref, _, warnings = await ensure(runtime, objects, make_pod("gone", "there", "also-gone"))
    assert isinstance(ref, str)
    assert warnings == [("FailedToRetrieveImagePullSecret", "Unable to retrieve some image pull secrets "
                         "(gone, also-gone); attempting to pull the image may not succeed.")]


async def test_an_unreadable_pull_secret_fails_the_pull_before_it_starts(runtime):
    bad = {"metadata": {"name": "bad", "namespace": "default"}, "type": "kubernetes.io/dockerconfigjson",
           "data": {".dockerconfigjson": b64('{"auths": {"r.io": {"auth": "!!"}}}')}}
    error, _, _ = await ensure(runtime, Objects(bad), make_pod("bad"))
    assert isinstance(error, ImageError) and error.reason == ERR_IMAGE_PULL
    assert error.message.startswith('couldn\'t read image pull secret "default/bad": data[.dockerconfigjson]')
    assert error.retry_in == 10.0
    assert runtime.pulls == []


async def test_the_back_off_after_a_refused_pull_says_why(runtime):
    manager = ImageManager(runtime, Backoff(clock=runtime.clock), PullCredentials(Objects()))
    pod = make_pod()
    outcomes = []
    for _ in range(2):
        with pytest.raises(ImageError) as e:
            await manager.ensure(pod.containers[0], api.PodSandboxConfig(), pod, lambda *event: None)
        outcomes.append((e.value.reason, e.value.message))
    refused = f'Failed to pull image "{PRIVATE}": failed to pull and unpack image "{PRIVATE}": 401 Unauthorized'
    assert outcomes == [("ErrImagePull", refused),
                        ("ImagePullBackOff", f'Back-off pulling image "{PRIVATE}": ErrImagePull: {refused}')]
    assert len(runtime.pulls) == 1


def test_the_nodes_docker_config_comes_from_the_first_usable_file(tmp_path, monkeypatch):
    root, home = tmp_path / "root", tmp_path / "home"
    (home / ".docker").mkdir(parents=True)
    root.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    (home / ".dockercfg").write_text(json.dumps({"legacy.io": {"auth": b64("old:pw")}}))
    assert [(k, c.username) for k, c in read_node_entries(str(root))] == [("legacy.io", "old")]
    (home / ".docker" / "config.json").write_text(json.dumps({"auths": {"r.io": {"auth": b64("home:pw")}},
                                                              "credsStore": "desktop"}))
    assert [(k, c.username) for k, c in read_node_entries(str(root))] == [("r.io", "home")]
    (root / "config.json").write_text('{"auths": {"r.io": {"auth": "%%%"}}}')  # unreadable: passed over
    assert [c.username for _, c in read_node_entries(str(root))] == ["home"]
    (root / "config.json").write_text(json.dumps({"auths": {"r.io": {"username": "root-dir", "password": "p"}}}))
    [(key, credential)] = read_node_entries(str(root))
    assert credential.username == "root-dir" and credential.source == f'node file "{root / "config.json"}"'


async def test_the_node_credentials_follow_the_pods_secrets(runtime, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"auths": {"registry.example.com:5000": {
        "username": "alice", "password": "right"}}}))
    objects = Objects(pull_secret("stale", {"registry.example.com:5000": {"username": "alice", "password": "old"}}))
    manager = ImageManager(runtime, Backoff(clock=runtime.clock),
                           PullCredentials(objects, node=NodeDockerConfig(str(tmp_path))))
    pod = make_pod("stale")
    assert await manager.ensure(pod.containers[0], api.PodSandboxConfig(), pod, lambda *event: None)
    assert [a.password for _, a in runtime.pulls] == ["old", "right"]
