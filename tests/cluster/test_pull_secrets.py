"""On a real control plane and containerd, against a real registry with basic auth: a pod whose
imagePullSecrets hold the registry's credentials pulls its private image and runs, so does one
whose service account holds them (the API copies them into the pod), and one on a node whose
credential provider plugin gives them; a pod without them gets ErrImagePull, then
ImagePullBackOff, with the registry's refusal in its status."""

from __future__ import annotations

import base64
import json
import pathlib
import secrets
import subprocess
import sys

import pytest

from tests.bed import images as bed_images
from tests.cluster.conftest import apply, kubectl, start_joined_agent, wait_ready
from tests.cluster.test_podspec_api import events, get_pod, pod, running, waiting
from tests.helpers import unmount_under, wait_for
from tests.registry import PrivateRegistry


@pytest.fixture
def registry(tmp_path: pathlib.Path):
    registry = PrivateRegistry(tmp_path / "registry", "puller", secrets.token_hex(12)).start()
    yield registry
    registry.stop()


@pytest.fixture
def private_image(registry: PrivateRegistry):
    """The test bed's busybox, pushed to the private registry; its name leaves containerd after."""
    layout, _ = bed_images.cached_image(bed_images.IMAGES["busybox"], pathlib.Path(bed_images.DEFAULT_CACHE))
    image = registry.push(layout, "private/busybox", "1.36")
    yield image
    # By name only (the tag, and the repo digest the CRI adds): the CRI's RemoveImage would remove
    # every name of the image, busybox:1.36 too.
    names = subprocess.run(["ctr", "-n", "k8s.io", "images", "ls", "-q"], capture_output=True, text=True,
                           timeout=60).stdout.split()
    ours = [name for name in names if name.startswith(f"{registry.host}/")]
    if ours:
        subprocess.run(["ctr", "-n", "k8s.io", "images", "rm", *ours], capture_output=True, timeout=60)


def refused(message: str) -> bool:
    """The registry's refusal as the runtime words it: containerd 1.6 passes on the registry's
    "401 Unauthorized", 2.x says "authorization failed: no basic auth credentials"."""
    return "401 Unauthorized" in message or "authorization failed" in message


def pull_secret(namespace: str, name: str, registry: str, username: str, password: str) -> dict:
    auth = base64.b64encode(f"{username}:{password}".encode()).decode()
    config = {"auths": {registry: {"auth": auth}}}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace},
            "type": "kubernetes.io/dockerconfigjson",
            "data": {".dockerconfigjson": base64.b64encode(json.dumps(config).encode()).decode()}}


def private_pod(namespace: str, name: str, image: str, *pull_secrets: str) -> dict:
    manifest = pod(namespace, name, "sleep 3600", image=image, imagePullPolicy="Always")
    if pull_secrets:
        manifest["spec"]["imagePullSecrets"] = [{"name": s} for s in pull_secrets]
    return manifest


async def test_a_private_image_pulls_with_its_secret_and_is_refused_without(node_agent, namespace, registry,
                                                                            private_image):
    apply(pull_secret(namespace, "wrong", registry.host, registry.username, "not-the-password"))
    apply(pull_secret(namespace, "regcred", f"http://{registry.host}/v2/", registry.username, registry.password))
    # Both secrets match the registry: the wrong one is tried too, the right one succeeds.
    apply(private_pod(namespace, "with-secret", private_image, "wrong", "regcred"))
    apply(private_pod(namespace, "without", private_image))
    await wait_for(lambda: running(namespace, "with-secret"), 90, "the pod with the pull secret running",
                   describe=node_agent.describe)

    await wait_for(lambda: waiting(namespace, "without").get("reason") == "ImagePullBackOff", 90,
                   "ImagePullBackOff without the pull secret", describe=node_agent.describe)
    message = waiting(namespace, "without")["message"]
    assert message.startswith(f'Back-off pulling image "{private_image}": ErrImagePull: Failed to pull image '
                              f'"{private_image}": ') and refused(message), message
    failures = [m for m in events(namespace, "Failed") if m.startswith(f'Failed to pull image "{private_image}"')]
    assert failures and all(refused(m) for m in failures), failures
    assert "Error: ErrImagePull" in events(namespace, "Failed")
    assert (get_pod(namespace, "without") or {})["status"]["phase"] == "Pending"
    assert registry.password not in node_agent.describe()


async def test_the_service_accounts_pull_secrets_reach_its_pods(node_agent, namespace, registry, private_image):
    apply(pull_secret(namespace, "regcred", registry.host, registry.username, registry.password))
    kubectl("patch", "serviceaccount", "default", "-n", namespace, "-p", '{"imagePullSecrets": [{"name": "regcred"}]}')
    apply(private_pod(namespace, "via-account", private_image))
    assert (get_pod(namespace, "via-account") or {})["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    await wait_for(lambda: running(namespace, "via-account"), 90, "the pod of the account with the pull secret",
                   describe=node_agent.describe)


async def test_a_missing_pull_secret_is_named_in_a_warning(node_agent, namespace, registry, private_image):
    apply(private_pod(namespace, "missing", private_image, "nowhere"))
    expected = ("Unable to retrieve some image pull secrets (nowhere); attempting to pull the image may not "
                "succeed.")
    await wait_for(lambda: expected in events(namespace, "FailedToRetrieveImagePullSecret"), 60,
                   "the FailedToRetrieveImagePullSecret event", describe=node_agent.describe)
    await wait_for(lambda: waiting(namespace, "missing").get("reason") in ("ErrImagePull", "ImagePullBackOff"), 60,
                   "the pull refused", describe=node_agent.describe)


@pytest.fixture
async def plugin_node(cluster, cri, tmp_path: pathlib.Path, registry: PrivateRegistry):
    """pykubelet with a credential provider plugin that answers the registry's credentials for
    images of 127.0.0.1:<its port> and records each request."""
    bin_dir = tmp_path / "plugins"
    bin_dir.mkdir()
    answer = {"apiVersion": "credentialprovider.kubelet.k8s.io/v1", "kind": "CredentialProviderResponse",
              "cacheKeyType": "Registry", "cacheDuration": "1m",
              "auth": {registry.host: {"username": registry.username, "password": registry.password}}}
    plugin = bin_dir / "registry-login"
    plugin.write_text(f"""#!{sys.executable}
import sys
with open({str(tmp_path / "requests")!r}, "a") as f:
    f.write(sys.stdin.read() + "\\n")
sys.stdout.write({json.dumps(answer)!r})
""")
    plugin.chmod(0o700)
    config = tmp_path / "credential-providers.yaml"
    config.write_text(json.dumps({
        "apiVersion": "kubelet.config.k8s.io/v1", "kind": "CredentialProviderConfig",
        "providers": [{"name": "registry-login", "apiVersion": "credentialprovider.kubelet.k8s.io/v1",
                       "matchImages": [f"127.0.0.1:{registry.port}"], "defaultCacheDuration": "10m"}]}))
    agent = start_joined_agent(tmp_path, "--image-credential-provider-config", str(config),
                               "--image-credential-provider-bin-dir", str(bin_dir))
    try:
        await wait_ready(agent)
        yield agent
    finally:
        agent.shutdown()
        unmount_under(str(tmp_path))


async def test_a_credential_provider_plugin_gives_the_credentials(plugin_node, tmp_path, namespace, registry,
                                                                  private_image):
    apply(private_pod(namespace, "via-plugin", private_image))
    await wait_for(lambda: running(namespace, "via-plugin"), 90, "the pod pulled with the plugin's credentials",
                   describe=plugin_node.describe)
    repository = private_image.rsplit(":", 1)[0]
    requests = [json.loads(line) for line in (tmp_path / "requests").read_text().splitlines() if line.strip()]
    assert requests == [{"apiVersion": "credentialprovider.kubelet.k8s.io/v1", "kind": "CredentialProviderRequest",
                         "image": repository}]
