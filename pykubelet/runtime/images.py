"""Image pulls per imagePullPolicy, with the kubelet's pull back-off and waiting reasons."""

from __future__ import annotations

import time
from typing import Callable

from pykubelet.api.pod import Container
from pykubelet.cri import errors
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.runtime.service import Runtime
from pykubelet.util.backoff import Backoff
from pykubelet.util.log import get_logger

log = get_logger(__name__)

ERR_IMAGE_PULL = "ErrImagePull"
IMAGE_PULL_BACKOFF = "ImagePullBackOff"
ERR_IMAGE_NEVER_PULL = "ErrImageNeverPull"


class ImageError(Exception):
    """The image is not usable yet; `reason` is the container's waiting reason."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


class ImageManager:
    def __init__(self, cri: Runtime, backoff: Backoff):
        self.cri = cri
        self.backoff = backoff

    async def ensure(self, container: Container, sandbox_config: api.PodSandboxConfig, pod_name: str,
                     record: Callable[[str, str, str], None],
                     pulled: Callable[[tuple[float, int]], None] | None = None) -> str:
        """The image ID to create the container from, pulling it first if the policy says so.

        `record(type, reason, message)` receives the kubelet's image events; `pulled((seconds,
        bytes))` hears of a pull that happened (bytes 0 when the runtime does not say).
        """
        image = container.image
        present = await self.cri.image_status(image)
        if container.image_pull_policy == "Never" or (present and container.image_pull_policy == "IfNotPresent"):
            if present:
                record("Normal", "Pulled", f'Container image "{image}" already present on machine')
                return present.id
            message = f'Container image "{image}" is not present with pull policy of Never'
            record("Warning", ERR_IMAGE_NEVER_PULL, message)
            raise ImageError(ERR_IMAGE_NEVER_PULL, message)
        if self.backoff.in_backoff_since_update(image):
            record("Normal", "BackOff", f'Back-off pulling image "{image}"')
            raise ImageError(IMAGE_PULL_BACKOFF, f'Back-off pulling image "{image}"')
        log.info("Pulling image", pod=pod_name, image=image)
        record("Normal", "Pulling", f'Pulling image "{image}"')
        started = time.monotonic()
        try:
            ref = await self.cri.pull_image(image, sandbox_config)
        except errors.CRIError as e:
            self.backoff.next(image, self.backoff.clock())
            log.warning("Failed to pull image", pod=pod_name, image=image, err=e.details)
            record("Warning", "Failed", f'Failed to pull image "{image}": {e.details}')
            raise ImageError(ERR_IMAGE_PULL, f'Failed to pull image "{image}": {e.details}') from e
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
