"""The Pod status this node reports, as typed values.

The pure status code (pods/podstatus.py) builds a PodStatus; it becomes a dict (the v1 JSON
shape) only where it leaves the process: the status manager's PATCH, the kubelet API's /pods,
the pods' history. Times are metav1.Time strings ("" for unset), as the API carries them, so a
status read back from the apiserver compares equal to the one that was sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CONTAINER_ID_SCHEME = "containerd://"


@dataclass
class Waiting:
    reason: str
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"waiting": {"reason": self.reason, **({"message": self.message} if self.message else {})}}


@dataclass
class Running:
    started_at: str

    def to_dict(self) -> dict[str, Any]:
        return {"running": {"startedAt": self.started_at or None}}


@dataclass
class Terminated:
    exit_code: int
    reason: str
    started_at: str
    finished_at: str
    container_id: str
    """With its scheme (containerd://...)."""
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"exitCode": self.exit_code, "reason": self.reason,
                               "startedAt": self.started_at or None, "finishedAt": self.finished_at or None,
                               "containerID": self.container_id}
        if self.message:
            out["message"] = self.message
        return {"terminated": out}


ContainerState = Waiting | Running | Terminated


@dataclass
class ContainerStatus:
    """One container's status. `started` and `ready` are the probes' to set
    (probes/readiness.py); the rest comes from the runtime and the last sync."""

    name: str
    image: str
    state: ContainerState
    image_id: str = ""
    container_id: str = ""
    """With its scheme; "" while the runtime holds no container of this name."""
    ready: bool = False
    started: bool | None = False
    """None: not reported (ephemeral containers have no probes to say so)."""
    restart_count: int = 0
    last_state: Terminated | None = None

    @property
    def running(self) -> bool:
        return isinstance(self.state, Running)

    @property
    def runtime_id(self) -> str:
        """The container's ID without its scheme, as the runtime and the probes know it."""
        return self.container_id.removeprefix(CONTAINER_ID_SCHEME)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "image": self.image, "imageID": self.image_id,
                               "ready": self.ready, "restartCount": self.restart_count,
                               "lastState": self.last_state.to_dict() if self.last_state else {},
                               "state": self.state.to_dict()}
        if self.started is not None:
            out["started"] = self.started
        if self.container_id:
            out["containerID"] = self.container_id
        return out


@dataclass
class PodStatus:
    phase: str
    container_statuses: list[ContainerStatus] = field(default_factory=list)
    init_container_statuses: list[ContainerStatus] = field(default_factory=list)
    ephemeral_container_statuses: list[ContainerStatus] = field(default_factory=list)
