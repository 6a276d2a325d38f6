"""Where the PLEG's pushed container exits come from (cri/client.py task_events): CRI
GetContainerEvents on a runtime that streams it (containerd 2.x), containerd's own task events
on one that answers UNIMPLEMENTED (1.6), a real gRPC server on a unix socket playing the runtime;
and the cgroup driver settled at start: RuntimeConfig's replaces cgroupDriver (2.x), else
cgroupDriver stays and is checked against the runtime's reported configuration (1.6)."""

from __future__ import annotations

import asyncio
import json

import grpc
import pytest

from pykubelet.assembly.runtime_checks import check_cgroup_driver
from pykubelet.config import Settings
from pykubelet.containerd import events_pb2, events_pb2_grpc
from pykubelet.cri import errors
from pykubelet.cri.client import CRIClient
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.cri.v1 import api_pb2_grpc as api_grpc
from pykubelet.runtime import cgroup_driver
from pykubelet.util import metrics
from pykubelet.util.tasks import LoopDied


class Runtime2(api_grpc.RuntimeServiceServicer):
    """containerd 2.x: the CRI stream, every lifecycle event of a container and its sandbox."""

    async def GetContainerEvents(self, request, context):
        for kind, cid in [(api.CONTAINER_CREATED_EVENT, "c1"), (api.CONTAINER_STARTED_EVENT, "c1"),
                          (api.CONTAINER_STOPPED_EVENT, "c1"), (api.CONTAINER_DELETED_EVENT, "c1"),
                          (api.CONTAINER_STOPPED_EVENT, "sb1")]:
            yield api.ContainerEventResponse(container_id=cid, container_event_type=kind)


class Runtime16(api_grpc.RuntimeServiceServicer):
    """containerd 1.6: no CRI stream (the base servicer answers UNIMPLEMENTED), its own events."""

    def __init__(self):
        self.cri_asked = 0

    def GetContainerEvents(self, request, context):
        self.cri_asked += 1
        return super().GetContainerEvents(request, context)


class Events16(events_pb2_grpc.EventsServicer):
    async def Subscribe(self, request, context):
        assert list(request.filters) == ['namespace=="k8s.io",topic=="/tasks/exit"',
                                         'namespace=="k8s.io",topic=="/tasks/oom"']
        yield events_pb2.Envelope(namespace="k8s.io", topic="/tasks/exit")


async def serve(tmp_path, runtime, events=None):
    server = grpc.aio.server()
    api_grpc.add_RuntimeServiceServicer_to_server(runtime, server)
    if events is not None:
        events_pb2_grpc.add_EventsServicer_to_server(events, server)
    server.add_insecure_port(f"unix://{tmp_path}/cri.sock")
    await server.start()
    return server


async def collect(client: CRIClient) -> list[str]:
    return [event async for event in client.task_events()]


async def test_containerd_2_pushes_only_the_stops_through_the_cri_stream(tmp_path):
    server = await serve(tmp_path, Runtime2())
    try:
        async with CRIClient(f"unix://{tmp_path}/cri.sock") as client:
            events = await asyncio.wait_for(collect(client), 10)
    finally:
        await server.stop(None)
    # The agent's own create/start/delete are not news; a container's and a sandbox's stop are.
    assert events == ["CONTAINER_STOPPED_EVENT c1", "CONTAINER_STOPPED_EVENT sb1"]


async def test_containerd_16_falls_back_to_its_task_events_and_asks_cri_only_once(tmp_path):
    runtime = Runtime16()
    server = await serve(tmp_path, runtime, Events16())
    try:
        async with CRIClient(f"unix://{tmp_path}/cri.sock") as client:
            assert await asyncio.wait_for(collect(client), 10) == ["/tasks/exit"]
            assert await asyncio.wait_for(collect(client), 10) == ["/tasks/exit"]  # a reconnect
    finally:
        await server.stop(None)
    assert runtime.cri_asked == 1


def test_the_cgroup_driver_of_a_runtime_config_answer():
    linux = api.LinuxRuntimeConfiguration
    assert cgroup_driver.from_runtime_config(
        api.RuntimeConfigResponse(linux=linux(cgroup_driver=api.CGROUPFS))) == "cgroupfs"
    assert cgroup_driver.from_runtime_config(
        api.RuntimeConfigResponse(linux=linux(cgroup_driver=api.SYSTEMD))) == "systemd"
    assert cgroup_driver.from_runtime_config(api.RuntimeConfigResponse()) is None  # no linux section
    with pytest.raises(ValueError, match="unknown cgroup driver 7"):
        cgroup_driver.from_runtime_config(api.RuntimeConfigResponse(linux=linux(cgroup_driver=7)))


class DriverRuntime:
    """What check_cgroup_driver asks: RuntimeConfig (or UNIMPLEMENTED), then the verbose Status."""

    def __init__(self, answer: api.RuntimeConfigResponse | None, status_info: dict[str, str]):
        self.answer, self.status_info = answer, status_info

    async def runtime_config(self) -> api.RuntimeConfigResponse:
        if self.answer is None:
            raise errors.Unimplemented("RuntimeConfig", grpc.StatusCode.UNIMPLEMENTED, "unknown method")
        return self.answer

    async def status(self, verbose: bool = False) -> api.StatusResponse:
        return api.StatusResponse(info=self.status_info)


def settings(driver: str) -> Settings:
    s = Settings()
    s.runtime.cgroup_driver = driver
    return s


SYSTEMD_16_INFO = {"config": json.dumps({"containerd": {"defaultRuntimeName": "runc", "runtimes": {
    "runc": {"runtimeType": "io.containerd.runc.v2", "options": {"SystemdCgroup": True}}}}})}


async def test_the_driver_runtime_config_names_replaces_cgroup_driver_as_in_the_kubelet():
    s = settings("systemd")
    await check_cgroup_driver(s, DriverRuntime(api.RuntimeConfigResponse(
        linux=api.LinuxRuntimeConfiguration(cgroup_driver=api.CGROUPFS)), SYSTEMD_16_INFO))
    assert s.runtime.cgroup_driver == "cgroupfs"
    s = settings("cgroupfs")
    await check_cgroup_driver(s, DriverRuntime(api.RuntimeConfigResponse(), {}))  # no linux section: ours
    assert s.runtime.cgroup_driver == "cgroupfs"


async def test_without_runtime_config_cgroup_driver_stays_and_a_mismatch_stops_the_agent():
    s = settings("cgroupfs")
    with pytest.raises(LoopDied, match="cgroupDriver is 'cgroupfs' but the container runtime uses 'systemd'"):
        await check_cgroup_driver(s, DriverRuntime(None, SYSTEMD_16_INFO))
    assert s.runtime.cgroup_driver == "cgroupfs"
    assert metrics.CRI_LOSING_SUPPORT.labels("1.37.0")._value.get() == 1


async def test_an_unknown_driver_stops_the_agent_with_the_kubelets_words():
    answer = api.RuntimeConfigResponse(linux=api.LinuxRuntimeConfiguration(cgroup_driver=7))
    with pytest.raises(LoopDied, match="runtime returned an unknown cgroup driver 7"):
        await check_cgroup_driver(settings("cgroupfs"), DriverRuntime(answer, {}))
