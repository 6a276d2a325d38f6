"""What the runtime holds for one pod: its sandboxes and containers, read back from CRI.

This is the kubelet's "PodStatus" from the runtime manager: plain data, newest first, built
only from CRI answers and the labels/annotations we set, so a restarted agent sees the same.
The PLEG inspects a pod when its listing changed (pleg/relist.py); workers read the result
from the runtime cache, never from CRI.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Iterable

from pykubelet.api.pod import DEFAULT_GRACE_SECONDS
from pykubelet.cri import errors
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.runtime import labels
from pykubelet.runtime.service import Runtime
from pykubelet.runtime.termination import termination_message

RUNNING, EXITED, CREATED, UNKNOWN = "running", "exited", "created", "unknown"
_STATE_NAMES = {api.CONTAINER_RUNNING: RUNNING, api.CONTAINER_EXITED: EXITED,
                api.CONTAINER_CREATED: CREATED, api.CONTAINER_UNKNOWN: UNKNOWN}
NS = 1e9  # CRI timestamps are nanoseconds since the epoch


@dataclass(frozen=True)
class SandboxState:
    id: str
    attempt: int
    ready: bool
    created_at: float  # seconds since the epoch
    ip: str = ""


@dataclass(frozen=True)
class ContainerState:
    id: str
    name: str
    state: str
    restart_count: int
    hash: str
    created_at: float
    started_at: float = 0.0
    finished_at: float = 0.0
    exit_code: int = 0
    reason: str = ""
    message: str = ""
    image: str = ""
    image_ref: str = ""
    sandbox_id: str = ""
    grace_seconds: int = DEFAULT_GRACE_SECONDS
    log_path: str = ""
    pre_stop: str = ""
    """The preStop handler the container recorded (JSON), for when its pod spec is gone."""


@dataclass
class PodRuntimeState:
    uid: str
    name: str = ""
    namespace: str = ""
    sandboxes: list[SandboxState] = field(default_factory=list)  # newest first
    containers: list[ContainerState] = field(default_factory=list)  # newest first

    def latest(self, container_name: str) -> ContainerState | None:
        return next((c for c in self.containers if c.name == container_name), None)

    def latest_in(self, container_name: str, sandbox_id: str) -> ContainerState | None:
        """The newest instance in one sandbox: init containers run again in a new sandbox."""
        return next((c for c in self.containers if c.name == container_name and c.sandbox_id == sandbox_id), None)

    def previous(self, container_name: str) -> ContainerState | None:
        """The instance before the latest one: the source of lastState."""
        same = [c for c in self.containers if c.name == container_name]
        return same[1] if len(same) > 1 else None

    def grace_seconds(self) -> int:
        """The pod's grace period as its containers recorded it (for pods whose spec is gone)."""
        return max((c.grace_seconds for c in self.containers), default=DEFAULT_GRACE_SECONDS)

    def running(self) -> list[ContainerState]:
        return [c for c in self.containers if c.state in (RUNNING, UNKNOWN)]

    @property
    def sandbox(self) -> SandboxState | None:
        """The newest sandbox: the one containers run in, or the next one replaces."""
        return self.sandboxes[0] if self.sandboxes else None

    def pod_ip(self, host_network: bool, host_ip: str) -> str:
        """The pod's IP, by the one rule there is (see pod_ip)."""
        return pod_ip(host_network, self.sandbox, host_ip)

    def first_seen(self) -> float:
        """When the runtime first held anything of the pod (0.0: nothing): what a restarted
        agent knows of the pod's start when no status says it."""
        return min((t for t in (*(s.created_at for s in self.sandboxes), *(c.created_at for c in self.containers))
                    if t), default=0.0)


def pod_ip(host_network: bool, sandbox: SandboxState | None, host_ip: str) -> str:
    """The one rule for a pod's IP (status.podIP, env status.podIP, hooks, probes, /etc/hosts):
    the node's for a host-network pod; else its newest sandbox's, while that sandbox is ready."""
    if host_network:
        return host_ip
    return sandbox.ip if sandbox is not None and sandbox.ready else ""


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
    )


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
