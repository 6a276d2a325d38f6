"""The unit tests' fake runtime (tests/fakes/runtime.py) served over CRI's gRPC on a unix socket, so
a benchmark can put the agent's real CRI client (gRPC, protobuf, its threads) in front of it with
no containerd. Run in its own process, so that its memory is not counted to the agent's:

    python -m tests.bench.fake_cri_server /path/to/cri.sock

Containers run until stopped; the event streams are not served (the agent relists, as it does
when a runtime has none).
"""

from __future__ import annotations

import asyncio
import sys
import time

import grpc

from pykubelet.cri import errors
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.cri.v1 import api_pb2_grpc as api_grpc
from tests.fakes.runtime import FakeRuntime
from tests.unit.core.harness import EPOCH

CODES = {errors.NotFound: grpc.StatusCode.NOT_FOUND}


def _selector(request_filter) -> dict[str, str] | None:
    return dict(request_filter.label_selector) or None


class Runtime(api_grpc.RuntimeServiceServicer):
    def __init__(self, fake: FakeRuntime):
        self.fake = fake

    async def Version(self, request, context):
        return api.VersionResponse(version="0.1.0", runtime_name="fake", runtime_version="1",
                                   runtime_api_version="v1")

    async def RunPodSandbox(self, request, context):
        return api.RunPodSandboxResponse(pod_sandbox_id=await self.fake.run_pod_sandbox(request.config,
                                                                                        request.runtime_handler))

    async def StopPodSandbox(self, request, context):
        await self.fake.stop_pod_sandbox(request.pod_sandbox_id)
        return api.StopPodSandboxResponse()

    async def RemovePodSandbox(self, request, context):
        await self.fake.remove_pod_sandbox(request.pod_sandbox_id)
        return api.RemovePodSandboxResponse()

    async def PodSandboxStatus(self, request, context):
        return await self.fake.pod_sandbox_status(request.pod_sandbox_id, request.verbose)

    async def ListPodSandbox(self, request, context):
        return api.ListPodSandboxResponse(items=await self.fake.list_pod_sandbox(_selector(request.filter)))

    async def CreateContainer(self, request, context):
        return api.CreateContainerResponse(container_id=await self.fake.create_container(
            request.pod_sandbox_id, request.config, request.sandbox_config))

    async def StartContainer(self, request, context):
        await self.fake.start_container(request.container_id)
        return api.StartContainerResponse()

    async def StopContainer(self, request, context):
        await self.fake.stop_container(request.container_id, request.timeout)
        return api.StopContainerResponse()

    async def RemoveContainer(self, request, context):
        await self.fake.remove_container(request.container_id)
        return api.RemoveContainerResponse()

    async def ListContainers(self, request, context):
        return api.ListContainersResponse(containers=await self.fake.list_containers(_selector(request.filter)))

    async def ContainerStatus(self, request, context):
        return await self.fake.container_status(request.container_id, request.verbose)

    async def ListContainerStats(self, request, context):
        return api.ListContainerStatsResponse(stats=await self.fake.list_container_stats(_selector(request.filter)))


class Images(api_grpc.ImageServiceServicer):
    def __init__(self, fake: FakeRuntime):
        self.fake = fake

    async def ImageStatus(self, request, context):
        return api.ImageStatusResponse(image=await self.fake.image_status(request.image.image))

    async def PullImage(self, request, context):
        return api.PullImageResponse(image_ref=await self.fake.pull_image(request.image.image, request.sandbox_config,
                                                                          request.auth))


class Errors(grpc.aio.ServerInterceptor):
    """The fake's CRIError as the gRPC status CRIClient maps back to it."""

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        inner = handler.unary_unary

        async def unary(request, context):
            try:
                return await inner(request, context)
            except errors.CRIError as e:
                await context.abort(CODES.get(type(e), grpc.StatusCode.UNKNOWN), str(e))
        return grpc.unary_unary_rpc_method_handler(unary, handler.request_deserializer, handler.response_serializer)


async def serve(socket: str) -> None:
    fake = FakeRuntime(lambda: EPOCH + time.monotonic())  # the harness's clock (its loop's time)
    server = grpc.aio.server(interceptors=[Errors()])
    api_grpc.add_RuntimeServiceServicer_to_server(Runtime(fake), server)
    api_grpc.add_ImageServiceServicer_to_server(Images(fake), server)
    server.add_insecure_port(f"unix://{socket}")
    await server.start()
    print("serving", flush=True)
    await server.wait_for_termination()


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1]))
