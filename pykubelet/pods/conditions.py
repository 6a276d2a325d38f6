"""The pod conditions the kubelet owns, derived from the container statuses of the same sync.

Pure logic, the kubelet's rules: Initialized is False (ContainersNotInitialized) while an init
container has not completed (a sidecar: not started), and True once any app container ran;
ContainersReady is False (ContainersNotReady) while a sidecar or app container is not ready,
with PodCompleted / PodFailed as the reason in a terminal phase; Ready is ContainersReady, and
then every spec.readinessGates condition (written by someone else) must be True too
(ReadinessGatesNotReady). Messages name the containers the way the kubelet prints a list.
Conditions of other types (PodScheduled from the scheduler, readiness gates) are not ours:
the pod's own are carried into each status, as the kubelet's status manager does.
"""

from __future__ import annotations

from dataclasses import dataclass

from pykubelet.api.pod import Pod
from pykubelet.api.pod_status import ContainerStatus, ForeignCondition, Running, Terminated

KUBELET_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady")
RESIZE_CONDITIONS = ("PodResizePending", "PodResizeInProgress")
"""Also the kubelet's: they come from the pod's resize state (pods/resize_state.py), not from here."""


@dataclass(frozen=True)
class Outcome:
    """A condition's verdict, before it is stamped with a transition time."""

    true: bool
    reason: str = ""
    message: str = ""


def _go_list(names: list[str]) -> str:
    return "[" + " ".join(names) + "]"  # how Go's %s prints a []string


def _messages(unknown: list[str], other: list[str], what: str) -> str:
    parts = [f"containers with unknown status: {_go_list(unknown)}"] if unknown else []
    if other:
        parts.append(f"containers with {what} status: {_go_list(other)}")
    return ", ".join(parts)


def initialized(pod: Pod, init_statuses: list[ContainerStatus], statuses: list[ContainerStatus],
                phase: str) -> Outcome:
    by_name = {s.name: s for s in init_statuses}
    unknown, incomplete = [], []
    for container in pod.init_containers:
        status = by_name.get(container.name)
        if status is None:
            unknown.append(container.name)
        elif not (status.started if container.is_sidecar else status.ready):
            incomplete.append(container.name)
    if phase == "Succeeded" and not unknown:
        return Outcome(True, "PodCompleted")
    if any(isinstance(s.state, (Running, Terminated)) for s in statuses):
        return Outcome(True)
    message = _messages(unknown, incomplete, "incomplete")
    return Outcome(False, "ContainersNotInitialized", message) if message else Outcome(True)


def containers_ready(pod: Pod, init_statuses: list[ContainerStatus], statuses: list[ContainerStatus],
                     phase: str) -> Outcome:
    by_name = {s.name: s for s in (*init_statuses, *statuses)}
    unknown, unready = [], []
    for container in (*(c for c in pod.init_containers if c.is_sidecar), *pod.containers):
        status = by_name.get(container.name)
        if status is None:
            unknown.append(container.name)
        elif not status.ready:
            unready.append(container.name)
    if phase == "Succeeded" and not unknown:
        return Outcome(False, "PodCompleted")
    if phase == "Failed":
        return Outcome(False, "PodFailed")
    message = _messages(unknown, unready, "unready")
    return Outcome(False, "ContainersNotReady", message) if message else Outcome(True)


def ready(pod: Pod, containers: Outcome, others: list[ForeignCondition]) -> Outcome:
    """`others`: the pod's conditions the kubelet does not own (readiness gates among them)."""
    if not containers.true:
        return containers
    by_type = {c.type: c for c in others}
    messages = []
    for gate in pod.raw.get("spec", {}).get("readinessGates") or []:
        kind = gate.get("conditionType", "")
        condition = by_type.get(kind)
        if condition is None:
            messages.append(f'corresponding condition of pod readiness gate "{kind}" does not exist.')
        elif condition.status != "True":
            messages.append(f'the status of pod readiness gate "{kind}" is not "True", but {condition.status}')
    return Outcome(False, "ReadinessGatesNotReady", ", ".join(messages)) if messages else Outcome(True)


def not_ours(pod: Pod) -> list[ForeignCondition]:
    """The pod's current conditions of types the kubelet does not own, except PodScheduled
    (which this node reports itself)."""
    status = pod.raw.get("status")
    conditions = status.get("conditions") if isinstance(status, dict) else None
    return [ForeignCondition.of(c) for c in conditions or [] if isinstance(c, dict)
            and c.get("type") not in (*KUBELET_CONDITIONS, *RESIZE_CONDITIONS, "PodScheduled")]
