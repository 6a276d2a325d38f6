"""What the runtime holds for one pod: its sandboxes and containers, read back from CRI.

This is the kubelet's "PodStatus" from the runtime manager: plain data, newest first, built
only from CRI answers and the labels/annotations we set, so a restarted agent sees the same.
The PLEG inspects a pod when its listing changed (runtime/inspect.py, from pleg/relist.py);
workers read the result from the runtime cache, never from CRI. Plain data only: the pure pod
code (pods/actions.py, pods/podstatus.py) reads it without importing any I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pykubelet.api.pod import DEFAULT_GRACE_SECONDS

RUNNING, EXITED, CREATED, UNKNOWN = "running", "exited", "created", "unknown"


@dataclass(frozen=True)
class SandboxState:
    id: str
    attempt: int
    ready: bool
    created_at: float  # seconds since the epoch
    ip: str = ""


@dataclass(frozen=True)
class ActualResources:
    """A container's cgroup settings as the runtime reports them (CRI's LinuxContainerResources)."""

    cpu_shares: int = 0
    cpu_quota: int = 0
    cpu_period: int = 0
    memory_limit_bytes: int = 0


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
    hash_without_resources: str = ""
    """"" for a container made before the agent recorded it (runtime/specs.py:spec_changed)."""
    resources: ActualResources | None = None
    """The Linux resources the runtime reports it runs with; None when the runtime does not say."""


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
