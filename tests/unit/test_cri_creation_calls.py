"""A creation call (RunPodSandbox, CreateContainer) in flight when the agent stops: the stopping
agent cancels the pod worker that made it, but the call itself reaches the runtime's answer
before the connection closes (a cancelled RunPodSandbox can cost containerd 1.6 a shim), and
closing waits no longer than the call's deadline. A real gRPC server on a unix socket plays the
runtime."""

from __future__ import annotations

import asyncio
import time

import grpc

from pykubelet.cri.client import CRIClient
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.cri.v1 import api_pb2_grpc as api_grpc
from tests.helpers import wait_for


class SlowRuntime(api_grpc.RuntimeServiceServicer):
    """Creates after `release` is set; records how each call ended on the runtime's side."""

    def __init__(self):
        self.release = asyncio.Event()
        self.began = asyncio.Event()
        self.ended: list[str] = []

    async def _create(self, context, answer):
        self.began.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:  # the call's deadline passed, or its client cancelled it
            self.ended.append("cancelled")
            raise
        self.ended.append("answered")
        return answer

    async def RunPodSandbox(self, request, context):
        return await self._create(context, api.RunPodSandboxResponse(pod_sandbox_id="sb1"))

    async def CreateContainer(self, request, context):
        return await self._create(context, api.CreateContainerResponse(container_id="c1"))


async def serve(tmp_path, runtime):
    server = grpc.aio.server()
    api_grpc.add_RuntimeServiceServicer_to_server(runtime, server)
    server.add_insecure_port(f"unix://{tmp_path}/cri.sock")
    await server.start()
    return server


SANDBOX = api.PodSandboxConfig(metadata=api.PodSandboxMetadata(name="p", uid="u", namespace="n"))


def creation_calls(client: CRIClient):
    return [client.run_pod_sandbox(SANDBOX),
            client.create_container("sb1", api.ContainerConfig(metadata=api.ContainerMetadata(name="c")), SANDBOX)]


async def test_a_cancelled_caller_leaves_its_creation_calls_to_finish_before_the_connection_closes(tmp_path):
    runtime = SlowRuntime()
    server = await serve(tmp_path, runtime)
    try:
        client = CRIClient(f"unix://{tmp_path}/cri.sock", slow_timeout=30)
        callers = [asyncio.ensure_future(call) for call in creation_calls(client)]
        await asyncio.wait_for(runtime.began.wait(), 10)
        for caller in callers:  # the agent stopping: its pod workers are cancelled
            caller.cancel()
        results = await asyncio.gather(*callers, return_exceptions=True)
        assert all(isinstance(r, asyncio.CancelledError) for r in results), results  # told at once
        closing = asyncio.ensure_future(client.close())
        await asyncio.sleep(0.3)
        assert not closing.done(), "the connection closed while the runtime was still creating"
        runtime.release.set()
        await asyncio.wait_for(closing, 10)
        assert sorted(runtime.ended) == ["answered", "answered"], runtime.ended
    finally:
        await server.stop(None)


async def test_closing_waits_for_a_creation_call_no_longer_than_its_deadline(tmp_path):
    runtime = SlowRuntime()  # never released: a runtime that hangs
    server = await serve(tmp_path, runtime)
    try:
        client = CRIClient(f"unix://{tmp_path}/cri.sock", slow_timeout=1.0)
        caller = asyncio.ensure_future(client.run_pod_sandbox(SANDBOX))
        await asyncio.wait_for(runtime.began.wait(), 10)
        caller.cancel()
        began = time.monotonic()
        await asyncio.wait_for(client.close(), 10)
        assert time.monotonic() - began < 3, "closing outlived the call's deadline"
        # Its deadline, not its caller, ended it.
        await wait_for(lambda: runtime.ended == ["cancelled"], 10, "the runtime to see the call's deadline pass")
    finally:
        await server.stop(None)


async def test_an_uncancelled_creation_call_answers_its_caller_as_before(tmp_path):
    runtime = SlowRuntime()
    runtime.release.set()
    server = await serve(tmp_path, runtime)
    try:
        async with CRIClient(f"unix://{tmp_path}/cri.sock") as client:
            assert await asyncio.wait_for(asyncio.gather(*creation_calls(client)), 10) == ["sb1", "c1"]
    finally:
        await server.stop(None)
