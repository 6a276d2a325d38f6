"""The runtime seam: the CRI calls the pod path makes, and nothing else.

The dispatcher, workers, syncer, PLEG and probes see the runtime only through `Runtime`.
`cri.client.CRIClient` implements it over gRPC; the unit tests of the core hand in an
in-memory fake (tests/fakes/runtime.py) instead, so the pod path runs in milliseconds.

The error contract is CRIClient's: failures raise `cri.errors.CRIError` subclasses
(`NotFound` when the object is gone, `Unavailable` when the runtime does not answer);
stopping or removing what is already gone succeeds.
"""

from __future__ import annotations

from typing import AsyncIterator, Protocol

from pykubelet.cri.v1 import api_pb2 as api


class Runtime(Protocol):
    slow_timeout: float
    """Seconds the slow calls (pull, create, start, stop) may take; hooks get as long."""

    # --- what the PLEG lists and inspects
    async def list_pod_sandbox(self, label_selector: dict[str, str] | None = None) -> list[api.PodSandbox]: ...

    async def list_containers(self, label_selector: dict[str, str] | None = None) -> list[api.Container]: ...

    async def pod_sandbox_status(self, sandbox_id: str, verbose: bool = False) -> api.PodSandboxStatusResponse: ...

    async def container_status(self, container_id: str, verbose: bool = False) -> api.ContainerStatusResponse: ...

    def task_events(self) -> AsyncIterator[str]:
        """Container exits as they happen (CRI GetContainerEvents, else containerd's task events),
        until the stream breaks (a CRIError); `Unimplemented` when the runtime has no such stream."""
        ...

    # --- what a worker does to its pod
    async def run_pod_sandbox(self, config: api.PodSandboxConfig, runtime_handler: str = "") -> str: ...

    async def stop_pod_sandbox(self, sandbox_id: str) -> None: ...

    async def remove_pod_sandbox(self, sandbox_id: str) -> None: ...

    async def create_container(self, sandbox_id: str, config: api.ContainerConfig,
                               sandbox_config: api.PodSandboxConfig) -> str: ...

    async def start_container(self, container_id: str) -> None: ...

    async def stop_container(self, container_id: str, grace_seconds: int) -> None: ...

    async def remove_container(self, container_id: str) -> None: ...

    async def exec_sync(self, container_id: str, cmd: list[str], timeout_seconds: int) -> api.ExecSyncResponse: ...

    async def update_container_resources(self, container_id: str, linux: api.LinuxContainerResources) -> None:
        """An in-place resize of a running container's cgroup."""
        ...

    async def list_container_stats(self, label_selector: dict[str, str] | None = None) -> list[api.ContainerStats]: ...

    # --- images
    async def image_status(self, image: str) -> api.Image | None: ...

    async def pull_image(self, image: str, sandbox_config: api.PodSandboxConfig | None = None,
                         auth: api.AuthConfig | None = None) -> str: ...
