"""Reading one pod's state back from CRI: its sandboxes' and containers' statuses, turned into
runtime/state.py's plain data (the PLEG calls it when a pod's listing changed)."""

from __future__ import annotations

import asyncio
from typing import Iterable

from pykubelet.api.pod import DEFAULT_GRACE_SECONDS
from pykubelet.cri import errors
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.runtime import labels
from pykubelet.runtime.service import Runtime
from pykubelet.runtime.state import ActualResources, CREATED, EXITED, RUNNING, UNKNOWN, ContainerState, PodRuntimeState, SandboxState
from pykubelet.runtime.termination import termination_message

_STATE_NAMES = {api.CONTAINER_RUNNING: RUNNING, api.CONTAINER_EXITED: EXITED,
                api.CONTAINER_CREATED: CREATED, api.CONTAINER_UNKNOWN: UNKNOWN}
NS = 1e9  # CRI timestamps are nanoseconds since the epoch


def _container_state(status: api.ContainerStatus, sandbox_id: str, termination: str) -> ContainerState:
    """`termination`: what the container left as its termination message; it follows the
    runtime's own message."""
    annotations = status.annotations
    return ContainerState(
        id=status.id,
        name=status.metadata.name,
        state=_STATE_NAMES.get(status.state, UNKNOWN),
        restart_count=int(annotations.get(labels.CONTAINER_RESTART_COUNT, status.metadata.attempt) or 0),
        hash=annotations.get(labels.CONTAINER_HASH, ""),
        hash_without_resources=annotations.get(labels.CONTAINER_HASH_WITHOUT_RESOURCES, ""),
        created_at=status.created_at / NS,
        started_at=status.started_at / NS,
        finished_at=status.finished_at / NS,
        exit_code=status.exit_code,
        reason=status.reason,
        message=": ".join(m for m in (status.message, termination) if m),
        image=status.image.user_specified_image or status.image.image,
        image_ref=status.image_ref,
        sandbox_id=sandbox_id,
        grace_seconds=int(annotations.get(labels.POD_TERMINATION_GRACE, "") or DEFAULT_GRACE_SECONDS),
        log_path=status.log_path,
        pre_stop=annotations.get(labels.PRE_STOP_HANDLER, ""),
        resources=_actual_resources(status),
    )


def _actual_resources(status: api.ContainerStatus) -> ActualResources | None:
    """What the runtime says the container runs with (CRI ContainerStatus.resources, which
    containerd fills for a running container); None when it says nothing."""
    if not status.HasField("resources") or not status.resources.HasField("linux"):
        return None
    linux = status.resources.linux
    return ActualResources(linux.cpu_shares, linux.cpu_quota, linux.cpu_period, linux.memory_limit_in_bytes)


async def inspect_pod(runtime: Runtime, uid: str, sandboxes: Iterable[api.PodSandbox],
                      containers: Iterable[api.Container], root_dir: str) -> PodRuntimeState:
    """The pod with this UID from its listed sandboxes and containers: the status of each ready
    sandbox (its IP) and of each container (times, exit code, message), newest first. `root_dir`
    holds the termination-message files the agent made for the pod's containers."""
    sandboxes, containers = list(sandboxes), list(containers)

    async def sandbox(s: api.PodSandbox) -> SandboxState:
        ip = ""
        if s.state == api.SANDBOX_READY:
            try:
                status = (await runtime.pod_sandbox_status(s.id)).status
                ip = status.network.ip
            except errors.NotFound:
                pass
        return SandboxState(id=s.id, attempt=s.metadata.attempt, ready=s.state == api.SANDBOX_READY,
                            created_at=s.created_at / NS, ip=ip)

    async def container(c: api.Container) -> ContainerState | None:
        try:
            status = (await runtime.container_status(c.id)).status
        except errors.NotFound:
            return None  # removed between the list and the status call
        # File I/O, in a thread: the event loop never waits on a disk (or on anything a pod made).
        message = await asyncio.to_thread(termination_message, status, root_dir, uid) \
            if status.state == api.CONTAINER_EXITED else ""
        return _container_state(status, c.pod_sandbox_id, message)

    sandbox_states = await asyncio.gather(*(sandbox(s) for s in sandboxes))
    container_states = [c for c in await asyncio.gather(*(container(c) for c in containers)) if c]
    state = PodRuntimeState(uid=uid)
    for labelled in (*sandboxes, *containers):
        state.name = labelled.labels.get(labels.POD_NAME, "")
        state.namespace = labelled.labels.get(labels.POD_NAMESPACE, "")
        break
    state.sandboxes = sorted(sandbox_states, key=lambda s: s.created_at, reverse=True)
    state.containers = sorted(container_states, key=lambda c: (c.created_at, c.restart_count), reverse=True)
    return state
