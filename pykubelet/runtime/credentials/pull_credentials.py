"""The credentials one image pull tries, in the kubelet's order: those of the pod's
imagePullSecrets that apply to the image, then the node's own (its docker config file), then
those of the credential provider plugins.

The kubelet reads only the pod's own imagePullSecrets (the ServiceAccount admission plugin has
already copied the service account's into a pod that named none). A secret it cannot get is
skipped with a FailedToRetrieveImagePullSecret Event; one whose docker config cannot be read fails
the pull before it starts.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

from pykubelet.api.pod import Pod
from pykubelet.kube.objects import NotSynced, ObjectCache, ObjectNotFound
from pykubelet.runtime.credentials.docker_config import Credential, DockerConfigError, secret_entries
from pykubelet.runtime.credentials.image_refs import ImageNameError, repository
from pykubelet.runtime.credentials.keyring import Keyring
from pykubelet.util.log import get_logger

log = get_logger(__name__)

FAILED_TO_RETRIEVE_PULL_SECRET = "FailedToRetrieveImagePullSecret"

Warn = Callable[[str, str], None]
"""(reason, message) of a Warning Event about the pod."""


class CredentialLookupError(Exception):
    """The pull cannot start: a pull secret cannot be read (the message names it and the field)."""


class PluginCredentials(Protocol):
    async def lookup(self, repository: str) -> list[Credential]: ...


class NodeCredentials(Protocol):
    async def entries(self) -> list[tuple[str, Credential]]: ...


def pull_secret_names(pod: Pod) -> list[str]:
    """The names of spec.imagePullSecrets, empty ones left out as the kubelet leaves them."""
    refs = pod.raw.get("spec", {}).get("imagePullSecrets")
    return [ref["name"] for ref in refs or () if isinstance(ref, dict) and isinstance(ref.get("name"), str)
            and ref["name"]]


def secrets_keyring(secrets: list[dict[str, Any]]) -> Keyring:
    """The keyring of the image pull secrets among `secrets`, in their order."""
    keyring = Keyring()
    for secret in secrets:
        try:
            entries = secret_entries(secret)
        except DockerConfigError as e:
            raise CredentialLookupError(f"couldn't read image pull {e}") from None
        keyring.add(entries or ())
    return keyring


class PullCredentials:
    def __init__(self, objects: ObjectCache | None, plugins: PluginCredentials | None = None,
                 node: NodeCredentials | None = None):
        self.objects = objects
        self.plugins = plugins
        self.node = node

    async def _secrets(self, pod: Pod, warn: Warn) -> list[dict[str, Any]]:
        found, failed = [], []
        for name in pull_secret_names(pod):
            if self.objects is None:
                failed.append(name)
                continue
            try:
                found.append(await self.objects.get("secrets", pod.namespace, name))
            except (ObjectNotFound, NotSynced) as e:
                log.info("Unable to retrieve pull secret, the image pull may not succeed.", pod=pod.full_name,
                         secret=f"{pod.namespace}/{name}", err=str(e))
                failed.append(name)
        if failed:
            warn(FAILED_TO_RETRIEVE_PULL_SECRET, f"Unable to retrieve some image pull secrets ({', '.join(failed)}); "
                                                 "attempting to pull the image may not succeed.")
        return found

    async def lookup(self, pod: Pod, image: str, warn: Warn) -> list[Credential]:
        """The credentials to try, in order; empty: pull anonymously."""
        secrets = await self._secrets(pod, warn)
        try:
            repo = repository(image)
        except ImageNameError:
            return []  # no registry to match: the runtime refuses the name with its own words
        credentials = secrets_keyring(secrets).lookup(repo)
        if self.node is not None:
            credentials += Keyring(await self.node.entries()).lookup(repo)
        if self.plugins is not None:
            credentials += await self.plugins.lookup(repo)
        return credentials
