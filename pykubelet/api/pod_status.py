"""The Pod status this node reports, as typed values.

The pure status code (pods/podstatus.py) builds a PodStatus; it becomes a dict (the v1 JSON
shape, `to_dict`) only where it leaves the process: the status manager (its PATCH, its stored
copy, /pods), the kubelet API, the pods' history. Times are metav1.Time strings ("" for unset,
null in JSON), as the API carries them, so a status read back from the apiserver compares equal
to the one that was sent. Optional fields are left out when empty, as the API's own JSON does.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from pykubelet.api.pod import Pod

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
    allocated_resources: dict[str, str] | None = None
    """The requests this node allocated to it (None: not reported, for ephemeral containers)."""
    resources: dict[str, dict[str, str]] | None = None
    """Its requests and limits as allocated, for a running one as the runtime reads them back."""

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
        if self.allocated_resources:
            out["allocatedResources"] = dict(self.allocated_resources)
        if self.resources:
            out["resources"] = {k: dict(v) for k, v in self.resources.items()}
        return out


@dataclass(frozen=True)
class PodCondition:
    """A condition this node decides (Ready, ContainersReady, Initialized...)."""

    type: str
    status: bool
    last_transition_time: str
    reason: str = ""
    message: str = ""
    observed_generation: int = 0
    """The pod generation it speaks of (every condition this node writes carries one; 0: none, not
    reported)."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type, "status": "True" if self.status else "False",
                               "lastProbeTime": None, "lastTransitionTime": self.last_transition_time or None}
        if self.observed_generation:
            out["observedGeneration"] = self.observed_generation
        if self.reason:
            out["reason"] = self.reason
        if self.message:
            out["message"] = self.message
        return out


@dataclass(frozen=True)
class ForeignCondition:
    """A condition someone else writes (a readiness gate's, say). It is not this node's to
    rewrite: each status carries it exactly as the pod has it; only its type and status are read."""

    type: str
    status: str
    written: Mapping[str, Any]

    @classmethod
    def of(cls, written: Mapping[str, Any]) -> ForeignCondition:
        kind = written.get("type")
        # The status as the readiness-gate message prints it, whatever another writer put there.
        return cls(kind if isinstance(kind, str) else "", str(written.get("status")), copy.deepcopy(dict(written)))

    def to_dict(self) -> dict[str, Any]:
        return copy.deepcopy(dict(self.written))


Condition = PodCondition | ForeignCondition


@dataclass
class PodStatus:
    phase: str
    container_statuses: list[ContainerStatus] = field(default_factory=list)
    init_container_statuses: list[ContainerStatus] = field(default_factory=list)
    ephemeral_container_statuses: list[ContainerStatus] = field(default_factory=list)
    conditions: list[Condition] = field(default_factory=list)
    host_ip: str = ""
    pod_ip: str = ""
    """Empty while the pod has none (no ready sandbox)."""
    start_time: str = ""
    qos_class: str = ""
    reason: str = ""
    """With `message`: why this node failed the pod for good (admission, its active deadline)."""
    message: str = ""
    observed_generation: int = 0
    """The pod's metadata.generation this status was made for (0: none, not reported)."""

    def to_dict(self) -> dict[str, Any]:
        """The v1 PodStatus JSON. `containerStatuses` is always there (a list, maybe empty):
        readers of this node's statuses index it without checking."""
        out: dict[str, Any] = {"phase": self.phase}
        if self.conditions:
            out["conditions"] = [c.to_dict() for c in self.conditions]
        if self.host_ip:
            out["hostIP"] = self.host_ip
            out["hostIPs"] = [{"ip": self.host_ip}]
        if self.pod_ip:
            out["podIP"] = self.pod_ip
            out["podIPs"] = [{"ip": self.pod_ip}]
        if self.start_time:
            out["startTime"] = self.start_time
        out["containerStatuses"] = [c.to_dict() for c in self.container_statuses]
        if self.init_container_statuses:
            out["initContainerStatuses"] = [c.to_dict() for c in self.init_container_statuses]
        if self.ephemeral_container_statuses:
            out["ephemeralContainerStatuses"] = [c.to_dict() for c in self.ephemeral_container_statuses]
        if self.qos_class:
            out["qosClass"] = self.qos_class
        if self.reason:
            out["reason"] = self.reason
        if self.message:
            out["message"] = self.message
        if self.observed_generation:
            out["observedGeneration"] = self.observed_generation
        return out


def pod_object(pod: Pod, status: Mapping[str, Any]) -> dict[str, Any]:
    """The pod as the API shows it, with `status` (v1 JSON) as its status."""
    obj = copy.deepcopy(pod.raw)
    obj.setdefault("apiVersion", "v1")
    obj.setdefault("kind", "Pod")
    obj["status"] = copy.deepcopy(dict(status))
    return obj


def pod_list(pods: Iterable[tuple[Pod, Mapping[str, Any]]]) -> dict[str, Any]:
    """A v1 PodList of pods with their statuses (what /pods serves, on every port)."""
    return {"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": [pod_object(p, s) for p, s in pods]}
