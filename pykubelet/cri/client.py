"""An asyncio CRI client: one method per RPC of runtime.v1 RuntimeService and ImageService.

Every call has a timeout; gRPC failures become typed errors (cri.errors); stopping and
removing something that is already gone is success, as with crictl and the kubelet.

A call that creates something (RunPodSandbox, CreateContainer) is not cancelled with its caller:
it runs to its answer or its deadline, and `close` waits for it (see `_run_to_completion`).
"""

from __future__ import annotations

import asyncio
import time
from typing import AsyncIterator, Awaitable, Callable, TypeVar

import grpc

from pykubelet.cri import errors
from pykubelet.cri.container_events import container_events
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.cri.task_events import task_events
from pykubelet.cri.v1 import api_pb2_grpc as api_grpc
from pykubelet.util import metrics
from pykubelet.util.log import get_logger

log = get_logger(__name__)

T = TypeVar("T")

# The kubelet's own limit: large nodes list many containers in one answer.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
DEFAULT_TIMEOUT = 10.0


class CRIClient:
    """Talks to a CRI runtime on a unix socket. `slow_timeout` bounds image pulls and stops.

    It implements runtime.service.Runtime, the seam the pod path sees the runtime through.
    """

    def __init__(self, endpoint: str, image_endpoint: str = "",
                 timeout: float = DEFAULT_TIMEOUT, slow_timeout: float = 120.0):
        self.endpoint = endpoint
        self.image_endpoint = image_endpoint or endpoint
        self.timeout = timeout
        self.slow_timeout = slow_timeout
        options = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                   ("grpc.max_send_message_length", MAX_MESSAGE_BYTES)]
        self._channel = grpc.aio.insecure_channel(endpoint, options=options)
        self._image_channel = (self._channel if self.image_endpoint == endpoint
                               else grpc.aio.insecure_channel(self.image_endpoint, options=options))
        self._runtime = api_grpc.RuntimeServiceStub(self._channel)
        self._images = api_grpc.ImageServiceStub(self._image_channel)
        self._cri_events: bool | None = None  # whether GetContainerEvents works; None: not tried yet
        self._creating: set[asyncio.Task] = set()  # creation calls whose callers may have gone

    @property
    def channel(self) -> grpc.aio.Channel:
        """The runtime socket's channel, for containerd's own services on it (events)."""
        return self._channel

    async def task_events(self) -> AsyncIterator[str]:
        """Container exits as they happen, until the stream breaks (a CRIError): CRI
        GetContainerEvents where the runtime streams it (containerd 2.x), else containerd's own
        task exit and OOM events (cri/task_events.py: 1.6 has no CRI stream)."""
        if self._cri_events is not False:
            try:
                async for event in container_events(self._runtime):
                    self._cri_events = True
                    yield event
                return
            except errors.Unimplemented:
                self._cri_events = False  # asked once: the answer holds for this runtime
        async for topic in task_events(self._channel):
            yield topic

    async def close(self) -> None:
        """Close the connections, once the creation calls still running have their answers
        (each is bounded by its own deadline, `slow_timeout`)."""
        if self._creating:
            log.info("Waiting for the runtime to finish what it is creating", calls=len(self._creating),
                     within_seconds=self.slow_timeout)
            await asyncio.wait(set(self._creating))
        await self._channel.close()
        if self._image_channel is not self._channel:
            await self._image_channel.close()

    async def __aenter__(self) -> "CRIClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _call(self, rpc: str, method: Callable[..., Awaitable[T]], request: object,
                    timeout: float | None = None) -> T:
        operation = metrics.operation_type(rpc)
        metrics.RUNTIME_OPERATIONS.labels(operation).inc()
        started = time.monotonic()
        try:
            return await method(request, timeout=timeout or self.timeout)
        except grpc.aio.AioRpcError as e:
            metrics.RUNTIME_OPERATION_ERRORS.labels(operation).inc()
            raise errors.from_rpc_error(rpc, e) from None
        finally:
            metrics.RUNTIME_OPERATION_DURATION.labels(operation).observe(time.monotonic() - started)

    async def _run_to_completion(self, rpc: str, method: Callable[..., Awaitable[T]], request: object) -> T:
        """A creation call that its caller's cancellation (the agent stopping) does not cancel.

        Cancelled while it starts a sandbox's shim, containerd 1.6 can lose that shim: the shim
        runs on serving nothing that containerd knows of, and nothing ever stops it. Let the call
        finish instead: what it made is then listed, and the next agent stops or adopts it as
        any other sandbox or container. The caller still learns at once that it was cancelled.
        """
        call = asyncio.ensure_future(self._call(rpc, method, request, self.slow_timeout))
        self._creating.add(call)
        call.add_done_callback(self._creation_done)
        return await asyncio.shield(call)

    def _creation_done(self, call: asyncio.Task) -> None:
        self._creating.discard(call)
        if not call.cancelled() and call.exception() is not None:  # retrieved here if its caller went
            log.debug("A creation call failed", err=str(call.exception()))

    async def _ignore_not_found(self, rpc: str, method: Callable[..., Awaitable[T]], request: object,
                                timeout: float | None = None) -> None:
        try:
            await self._call(rpc, method, request, timeout)
        except errors.NotFound:
            pass

    # --- runtime: identity and health
    async def version(self) -> api.VersionResponse:
        return await self._call("Version", self._runtime.Version, api.VersionRequest(version="v1"))

    async def status(self, verbose: bool = False) -> api.StatusResponse:
        return await self._call("Status", self._runtime.Status, api.StatusRequest(verbose=verbose))

    async def runtime_config(self) -> api.RuntimeConfigResponse:
        """The runtime's own configuration the kubelet adopts (its cgroup driver); `Unimplemented`
        from runtimes without the call (containerd before 2.0)."""
        return await self._call("RuntimeConfig", self._runtime.RuntimeConfig, api.RuntimeConfigRequest())

    async def update_runtime_config(self, pod_cidr: str) -> None:
        config = api.RuntimeConfig(network_config=api.NetworkConfig(pod_cidr=pod_cidr))
        await self._call("UpdateRuntimeConfig", self._runtime.UpdateRuntimeConfig,
                         api.UpdateRuntimeConfigRequest(runtime_config=config))

    # --- runtime: sandboxes
    async def run_pod_sandbox(self, config: api.PodSandboxConfig, runtime_handler: str = "") -> str:
        response = await self._run_to_completion(
            "RunPodSandbox", self._runtime.RunPodSandbox,
            api.RunPodSandboxRequest(config=config, runtime_handler=runtime_handler))
        return response.pod_sandbox_id

    async def stop_pod_sandbox(self, sandbox_id: str) -> None:
        await self._ignore_not_found("StopPodSandbox", self._runtime.StopPodSandbox,
                                     api.StopPodSandboxRequest(pod_sandbox_id=sandbox_id), self.slow_timeout)

    async def remove_pod_sandbox(self, sandbox_id: str) -> None:
        await self._ignore_not_found("RemovePodSandbox", self._runtime.RemovePodSandbox,
                                     api.RemovePodSandboxRequest(pod_sandbox_id=sandbox_id), self.slow_timeout)

    async def pod_sandbox_status(self, sandbox_id: str, verbose: bool = False) -> api.PodSandboxStatusResponse:
        return await self._call("PodSandboxStatus", self._runtime.PodSandboxStatus,
                                api.PodSandboxStatusRequest(pod_sandbox_id=sandbox_id, verbose=verbose))

    async def list_pod_sandbox(self, label_selector: dict[str, str] | None = None) -> list[api.PodSandbox]:
        request = api.ListPodSandboxRequest(filter=api.PodSandboxFilter(label_selector=label_selector or {}))
        return list((await self._call("ListPodSandbox", self._runtime.ListPodSandbox, request)).items)

    # --- runtime: containers
    async def create_container(self, sandbox_id: str, config: api.ContainerConfig,
                               sandbox_config: api.PodSandboxConfig) -> str:
        request = api.CreateContainerRequest(pod_sandbox_id=sandbox_id, config=config,
                                             sandbox_config=sandbox_config)
        response = await self._run_to_completion("CreateContainer", self._runtime.CreateContainer, request)
        return response.container_id

    async def start_container(self, container_id: str) -> None:
        try:
            await self._call("StartContainer", self._runtime.StartContainer,
                             api.StartContainerRequest(container_id=container_id), self.slow_timeout)
        except errors.CRIError as e:
            metrics.STARTED_CONTAINER_ERRORS.labels(type(e).__name__, "container").inc()
            raise
        metrics.STARTED_CONTAINERS.labels("container").inc()

    async def stop_container(self, container_id: str, grace_seconds: int) -> None:
        """SIGTERM, then SIGKILL after grace_seconds; the call waits that long plus a margin."""
        await self._ignore_not_found("StopContainer", self._runtime.StopContainer,
                                     api.StopContainerRequest(container_id=container_id, timeout=grace_seconds),
                                     grace_seconds + self.timeout)

    async def remove_container(self, container_id: str) -> None:
        await self._ignore_not_found("RemoveContainer", self._runtime.RemoveContainer,
                                     api.RemoveContainerRequest(container_id=container_id), self.slow_timeout)

    async def list_containers(self, label_selector: dict[str, str] | None = None) -> list[api.Container]:
        request = api.ListContainersRequest(filter=api.ContainerFilter(label_selector=label_selector or {}))
        return list((await self._call("ListContainers", self._runtime.ListContainers, request)).containers)

    async def container_status(self, container_id: str, verbose: bool = False) -> api.ContainerStatusResponse:
        return await self._call("ContainerStatus", self._runtime.ContainerStatus,
                                api.ContainerStatusRequest(container_id=container_id, verbose=verbose))

    async def exec_sync(self, container_id: str, cmd: list[str], timeout_seconds: int) -> api.ExecSyncResponse:
        request = api.ExecSyncRequest(container_id=container_id, cmd=cmd, timeout=timeout_seconds)
        return await self._call("ExecSync", self._runtime.ExecSync, request, timeout_seconds + self.timeout)

    async def update_container_resources(self, container_id: str, linux: api.LinuxContainerResources) -> None:
        await self._call("UpdateContainerResources", self._runtime.UpdateContainerResources,
                         api.UpdateContainerResourcesRequest(container_id=container_id, linux=linux))

    async def reopen_container_log(self, container_id: str) -> None:
        """The runtime closes and reopens the container's log file (after a rotation renamed it)."""
        await self._call("ReopenContainerLog", self._runtime.ReopenContainerLog,
                         api.ReopenContainerLogRequest(container_id=container_id))

    # --- runtime: streaming (the answer is a one-time URL on the runtime's streaming server)
    async def exec(self, container_id: str, cmd: list[str], *, tty: bool, stdin: bool, stdout: bool,
                   stderr: bool) -> str:
        request = api.ExecRequest(container_id=container_id, cmd=cmd, tty=tty, stdin=stdin, stdout=stdout,
                                  stderr=stderr)
        return (await self._call("Exec", self._runtime.Exec, request)).url

    async def attach(self, container_id: str, *, tty: bool, stdin: bool, stdout: bool, stderr: bool) -> str:
        request = api.AttachRequest(container_id=container_id, tty=tty, stdin=stdin, stdout=stdout, stderr=stderr)
        return (await self._call("Attach", self._runtime.Attach, request)).url

    async def port_forward(self, sandbox_id: str, ports: list[int]) -> str:
        request = api.PortForwardRequest(pod_sandbox_id=sandbox_id, port=ports)
        return (await self._call("PortForward", self._runtime.PortForward, request)).url

    # --- runtime: stats
    async def list_container_stats(self, label_selector: dict[str, str] | None = None) -> list[api.ContainerStats]:
        request = api.ListContainerStatsRequest(filter=api.ContainerStatsFilter(label_selector=label_selector or {}))
        return list((await self._call("ListContainerStats", self._runtime.ListContainerStats, request)).stats)

    async def list_metric_descriptors(self) -> list[api.MetricDescriptor]:
        """What each series ListPodSandboxMetrics answers is: name, help, label keys; `Unimplemented`
        from runtimes without the call (containerd before 2.0)."""
        return list((await self._call("ListMetricDescriptors", self._runtime.ListMetricDescriptors,
                                      api.ListMetricDescriptorsRequest())).descriptors)

    async def list_pod_sandbox_metrics(self) -> list[api.PodSandboxMetrics]:
        """The series the runtime measures for each ready sandbox and its containers (cAdvisor's,
        made by the runtime); `Unimplemented` from runtimes without the call (containerd before 2.0)."""
        return list((await self._call("ListPodSandboxMetrics", self._runtime.ListPodSandboxMetrics,
                                      api.ListPodSandboxMetricsRequest())).pod_metrics)

    async def image_fs_info(self) -> api.ImageFsInfoResponse:
        return await self._call("ImageFsInfo", self._images.ImageFsInfo, api.ImageFsInfoRequest())

    # --- images
    async def list_images(self) -> list[api.Image]:
        return list((await self._call("ListImages", self._images.ListImages, api.ListImagesRequest())).images)

    async def image_status(self, image: str) -> api.Image | None:
        """The image if present, None if not (CRI answers an empty status, not NotFound)."""
        response = await self._call("ImageStatus", self._images.ImageStatus,
                                    api.ImageStatusRequest(image=api.ImageSpec(image=image)))
        return response.image if response.HasField("image") and response.image.id else None

    async def pull_image(self, image: str, sandbox_config: api.PodSandboxConfig | None = None,
                         auth: api.AuthConfig | None = None) -> str:
        """Pull and return the image reference (its ID) the runtime resolved; `auth`: the registry
        credentials to pull with (None: anonymously)."""
        request = api.PullImageRequest(image=api.ImageSpec(image=image), sandbox_config=sandbox_config, auth=auth)
        return (await self._call("PullImage", self._images.PullImage, request, self.slow_timeout)).image_ref

    async def remove_image(self, image: str) -> None:
        """Remove the image (a reference, or an ID: then every tag of it); gone already is success."""
        await self._ignore_not_found("RemoveImage", self._images.RemoveImage,
                                     api.RemoveImageRequest(image=api.ImageSpec(image=image)), self.slow_timeout)
