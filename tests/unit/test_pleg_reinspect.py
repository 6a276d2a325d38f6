"""The PLEG's re-inspection on request (a worker that updated a container's resources in place):
the pod's cached state is refreshed, and its worker woken only when the state changed."""

from __future__ import annotations

import time

from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.pleg.cache import RuntimeCache
from pykubelet.pleg.relist import RelistPLEG
from pykubelet.runtime import labels
from tests.fakes.runtime import FakeRuntime

UID = "uid-web"


async def a_running_pod(runtime: FakeRuntime, tmp_path) -> str:
    meta = {labels.POD_UID: UID}
    sandbox_config = api.PodSandboxConfig(metadata=api.PodSandboxMetadata(name="web", uid=UID), labels=meta,
                                          log_directory=str(tmp_path))
    sandbox = await runtime.run_pod_sandbox(sandbox_config)
    config = api.ContainerConfig(metadata=api.ContainerMetadata(name="app"), log_path="app/0.log",
                                 labels={**meta, labels.CONTAINER_NAME: "app"})
    config.linux.resources.memory_limit_in_bytes = 64 << 20
    container = await runtime.create_container(sandbox, config, sandbox_config)
    await runtime.start_container(container)
    return container


async def test_a_reinspection_that_shows_no_change_wakes_nobody(tmp_path):
    runtime, cache, woken = FakeRuntime(time.time), RuntimeCache(), []
    pleg = RelistPLEG(runtime, cache, woken.append, time.time, str(tmp_path))
    container = await a_running_pod(runtime, tmp_path)
    await pleg.relist()
    assert woken == [UID]  # a new pod

    # A resize the runtime refused (a memory limit below usage): nothing changed, nothing wakes.
    # Waking would sync the pod, try the resize again and ask again, as fast as the runtime answers.
    cache.reinspect(UID)
    await pleg.relist()
    assert woken == [UID] and runtime.count("ContainerStatus") == 2  # inspected all the same

    # A resize applied: the new limit is in the cache, and the worker hears of it.
    await runtime.update_container_resources(container, api.LinuxContainerResources(memory_limit_in_bytes=128 << 20))
    cache.reinspect(UID)
    await pleg.relist()
    assert woken == [UID, UID]
    (state,) = cache.get(UID).containers
    assert state.resources is not None and state.resources.memory_limit_bytes == 128 << 20
