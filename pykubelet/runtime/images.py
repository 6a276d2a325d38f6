"""Image pulls per imagePullPolicy, with the kubelet's pull back-off and waiting reasons, and the
registry credentials the pod may use (credentials/pull_credentials.py): each one tried in turn
until a pull succeeds; none, an anonymous pull."""

from __future__ import annotations

import time
from typing import Callable

from pykubelet.api.pod import Container, Pod
from pykubelet.cri import errors
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.runtime.credentials.docker_config import Credential
from pykubelet.runtime.credentials.pull_credentials import CredentialLookupError, PullCredentials
from pykubelet.runtime.service import Runtime
from pykubelet.util.backoff import Backoff
from pykubelet.util.log import get_logger

log = get_logger(__name__)

ERR_IMAGE_PULL = "ErrImagePull"
IMAGE_PULL_BACKOFF = "ImagePullBackOff"
ERR_IMAGE_NEVER_PULL = "ErrImageNeverPull"


class ImageError(Exception):
    """The image is not usable yet; `reason` is the container's waiting reason."""

    def __init__(self, reason: str, message: str, retry_in: float | None = None):
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.retry_in = retry_in
        """Seconds until the next try when no pull back-off says it (the pull never started)."""


RETRY_WITHOUT_PULL = 10.0
"""The kubelet's pod worker retries a sync that failed before any pull after this long."""


def aggregate(messages: list[str]) -> str:
    """Several failures as one message, as the kubelet aggregates errors: duplicates once, more
    than one distinct message in brackets."""
    distinct = list(dict.fromkeys(messages))
    return distinct[0] if len(distinct) == 1 else f"[{', '.join(distinct)}]"


class ImageManager:
    def __init__(self, cri: Runtime, backoff: Backoff, credentials: PullCredentials | None = None):
        self.cri = cri
        self.backoff = backoff
        self.credentials = credentials or PullCredentials(None)
        self.last_failure: dict[str, str] = {}
        """image -> why its last pull failed, told during the back-off that followed."""

    async def _pull(self, image: str, sandbox_config: api.PodSandboxConfig, credentials: list[Credential]) -> str:
        """One pull per credential until one succeeds (the kubelet's order, no anonymous try after
        them); with none, one anonymous pull. CRIError with every failure's words when all fail."""
        if not credentials:
            return await self.cri.pull_image(image, sandbox_config)
        failures: list[errors.CRIError] = []
        for credential in credentials:
            auth = api.AuthConfig(username=credential.username, password=credential.password)
            try:
                return await self.cri.pull_image(image, sandbox_config, auth)
            except errors.CRIError as e:
                failures.append(e)
        if len(failures) == 1:
            raise failures[0]
        raise errors.CRIError("PullImage", failures[-1].code, aggregate([e.details for e in failures]))

    async def ensure(self, container: Container, sandbox_config: api.PodSandboxConfig, pod: Pod,
                     record: Callable[[str, str, str], None],
                     pulled: Callable[[tuple[float, int]], None] | None = None,
                     warn_pod: Callable[[str, str], None] | None = None) -> str:
        """The image ID to create the container from, pulling it first if the policy says so.

        `record(type, reason, message)` receives the kubelet's image events; `pulled((seconds,
        bytes))` hears of a pull that happened (bytes 0 when the runtime does not say);
        `warn_pod(reason, message)` a Warning about the pod (a pull secret it cannot get).
        """
        image, pod_name = container.image, pod.full_name
        present = await self.cri.image_status(image)
        if container.image_pull_policy == "Never" or (present and container.image_pull_policy == "IfNotPresent"):
            if present:
                record("Normal", "Pulled", f'Container image "{image}" already present on machine')
                return present.id
            message = f'Container image "{image}" is not present with pull policy of Never'
            record("Warning", ERR_IMAGE_NEVER_PULL, message)
            raise ImageError(ERR_IMAGE_NEVER_PULL, message)
        try:
            credentials = await self.credentials.lookup(pod, image, warn_pod or (lambda reason, message: None))
        except CredentialLookupError as e:
            log.warning("Failed to look up image pull credentials", pod=pod_name, image=image, err=str(e))
            raise ImageError(ERR_IMAGE_PULL, str(e), retry_in=RETRY_WITHOUT_PULL) from e
        if self.backoff.in_backoff_since_update(image):
            record("Normal", "BackOff", f'Back-off pulling image "{image}"')
            message = f'Back-off pulling image "{image}"'
            if image in self.last_failure:  # the status says why, as the kubelet's does
                message += f": {ERR_IMAGE_PULL}: {self.last_failure[image]}"
            raise ImageError(IMAGE_PULL_BACKOFF, message)
        self.last_failure.pop(image, None)  # kept from a failed pull until the next try only
        # Where the credentials came from may be logged; the credentials never.
        log.info("Pulling image", pod=pod_name, image=image, credentials=[c.source for c in credentials])
        record("Normal", "Pulling", f'Pulling image "{image}"')
        started = time.monotonic()
        try:
            ref = await self._pull(image, sandbox_config, credentials)
        except errors.CRIError as e:
            self.backoff.next(image, self.backoff.clock())
            log.warning("Failed to pull image", pod=pod_name, image=image, err=e.details)
            message = f'Failed to pull image "{image}": {e.details}'
            record("Warning", "Failed", message)
            self.last_failure[image] = message
            raise ImageError(ERR_IMAGE_PULL, message) from e
        seconds = time.monotonic() - started
        log.info("Pulled image", pod=pod_name, image=image, ref=ref)
        record("Normal", "Pulled", f'Successfully pulled image "{image}" in {seconds:.3f}s')
        if pulled is not None:
            try:
                size = getattr(await self.cri.image_status(ref), "size", 0)
            except errors.CRIError:
                size = 0  # only the history's byte count: not worth failing the start
            pulled((seconds, size))
        return ref
