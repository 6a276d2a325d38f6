"""The Pod status a user sees (kubectl's view), derived from spec + runtime state + last sync.

Pure logic following the kubelet: container states with lastState and restartCount, waiting
reasons from the last sync (CrashLoopBackOff, ErrImagePull...), phase, conditions, IPs.
"""

from __future__ import annotations

from typing import Any, Callable

from pykubelet.api.pod import Pod
from pykubelet.api.times import rfc3339
from pykubelet.pods import conditions
from pykubelet.pods.actions import init_done, init_failed, should_restart
from pykubelet.runtime.resources import qos_class
from pykubelet.runtime.state import EXITED, RUNNING, ContainerState, PodRuntimeState

CONTAINER_CREATING = "ContainerCreating"
POD_INITIALIZING = "PodInitializing"
CONTAINER_ID_SCHEME = "containerd://"


def _terminated(c: ContainerState) -> dict[str, Any]:
    reason = c.reason or ("Completed" if c.exit_code == 0 else "Error")
    out = {"exitCode": c.exit_code, "reason": reason, "startedAt": rfc3339(c.started_at),
           "finishedAt": rfc3339(c.finished_at), "containerID": CONTAINER_ID_SCHEME + c.id}
    if c.message:
        out["message"] = c.message
    return out


def _state(c: ContainerState) -> dict[str, Any]:
    if c.state == RUNNING:
        return {"running": {"startedAt": rfc3339(c.started_at)}}
    if c.state == EXITED:
        return {"terminated": _terminated(c)}
    return {"waiting": {"reason": CONTAINER_CREATING}}


ProbeView = Callable[[str], tuple[bool, bool]]  # container ID -> (started, ready) from its probes


def _no_probes(_: str) -> tuple[bool, bool]:
    return True, True


def container_status(pod: Pod, name: str, image: str, state: PodRuntimeState,
                     waiting: tuple[str, str] | None, probes: ProbeView = _no_probes) -> dict[str, Any]:
    latest = state.latest(name)
    status: dict[str, Any] = {"name": name, "image": image, "imageID": "", "ready": False,
                              "started": False, "restartCount": 0, "lastState": {}}
    if latest is None:
        reason, message = waiting or (CONTAINER_CREATING, "")
        status["state"] = {"waiting": {"reason": reason, **({"message": message} if message else {})}}
        return status
    status.update(restartCount=latest.restart_count, imageID=latest.image_ref,
                  containerID=CONTAINER_ID_SCHEME + latest.id, state=_state(latest))
    previous = state.previous(name)
    if previous is not None and previous.state == EXITED:
        status["lastState"] = {"terminated": _terminated(previous)}
    if latest.state == RUNNING:
        started, ready = probes(latest.id)
        status["started"], status["ready"] = started, started and ready
    elif waiting and should_restart(latest, pod.restart_policy):
        # It will run again: show why it waits, and keep what it exited with as lastState.
        if latest.state == EXITED:
            status["lastState"] = {"terminated": _terminated(latest)}
        reason, message = waiting
        status["state"] = {"waiting": {"reason": reason, **({"message": message} if message else {})}}
    return status


def _ephemeral_status(pod: Pod, name: str, image: str, state: PodRuntimeState,
                      waiting: tuple[str, str] | None) -> dict[str, Any]:
    """An ephemeral container's status: never ready, no probes to say it started (the kubelet's)."""
    status = container_status(pod, name, image, state, waiting)
    status["ready"] = False
    status.pop("started", None)
    return status


def pod_phase(pod: Pod, statuses: list[dict[str, Any]], terminal: bool = False) -> str:
    """The kubelet's getPhase over the app containers. A terminal pod (deleted, its containers
    stopped for good) that is not static is Succeeded or Failed whatever its restart policy."""
    running = waiting = stopped = succeeded = unknown = 0
    for status in statuses:
        state = status.get("state", {})
        if "running" in state:
            running += 1
        elif "terminated" in state:
            stopped += 1
            succeeded += state["terminated"]["exitCode"] == 0
        elif "waiting" in state:
            if "terminated" in status.get("lastState", {}):
                stopped += 1
            else:
                waiting += 1
        else:
            unknown += 1
    if waiting:
        return "Pending"
    if running and not unknown:
        return "Running"
    if not running and stopped and not unknown:
        if terminal and not pod.is_static:
            return "Succeeded" if stopped == succeeded else "Failed"
        if pod.restart_policy == "Always":
            return "Running"
        if stopped == succeeded:
            return "Succeeded"
        return "Failed" if pod.restart_policy == "Never" else "Running"
    return "Pending"


def _condition(kind: str, outcome: conditions.Outcome, now: str) -> dict[str, Any]:
    true, reason, message = outcome
    cond = {"type": kind, "status": "True" if true else "False", "lastProbeTime": None,
            "lastTransitionTime": now}
    if reason:
        cond["reason"] = reason
    if message:
        cond["message"] = message
    return cond


def _times_from_runtime(pod: Pod, state: PodRuntimeState, start_time: float) -> dict[str, float]:
    """When each condition last turned True, as far as the runtime tells (an adopted pod's)."""
    sandbox = state.sandbox
    in_sandbox = [c for c in state.containers if sandbox is not None and c.sandbox_id == sandbox.id]
    init_names = {c.name for c in pod.init_containers if not c.is_sidecar}
    app_names = {c.name for c in pod.containers}
    initialized = max((c.finished_at for c in in_sandbox if c.name in init_names), default=0.0)
    ready = max((c.started_at for c in in_sandbox if c.name in app_names and c.state == RUNNING), default=0.0)
    created = sandbox.created_at if sandbox is not None else 0.0
    return {"PodReadyToStartContainers": created, "Initialized": initialized or created,
            "Ready": ready, "ContainersReady": ready, "PodScheduled": start_time}


def pod_status(pod: Pod, state: PodRuntimeState, waiting: dict[str, tuple[str, str]],
               host_ip: str, start_time: float, probes: ProbeView = _no_probes,
               now: float | None = None, terminal: bool = False,
               evicted: tuple[str, str] | None = None) -> dict[str, Any]:
    """The status as of `now`: conditions are stamped with it (the status manager keeps the
    earlier time of a condition that did not change). `now` None: the pod was running before
    this agent looked, so True conditions get the runtime's times (sandbox created, containers
    started) instead. `terminal`: the pod's containers were stopped for good (pod_phase).
    `evicted`: (reason, message) of a pod this node failed for good (its active deadline)."""
    unstarted = {c.id for c in state.running() if not probes(c.id)[0]}
    initialized = init_done(pod, state, unstarted)
    # Until initialization is over, containers that have not run yet wait with PodInitializing.
    def reason(name: str) -> tuple[str, str] | None:
        if name in waiting:
            return waiting[name]
        return (POD_INITIALIZING, "") if not initialized and state.latest(name) is None else None

    statuses = [container_status(pod, c.name, c.image, state, reason(c.name), probes) for c in pod.containers]
    init_statuses = []
    for c in pod.init_containers:
        init_status = container_status(pod, c.name, c.image, state, reason(c.name), probes)
        if not c.is_sidecar:
            # An init container is ready once it has finished successfully, not while it runs.
            terminated = init_status["state"].get("terminated")
            init_status["ready"] = bool(terminated and terminated["exitCode"] == 0)
        init_statuses.append(init_status)
    if init_failed(pod, state):
        phase = "Failed"
    elif not initialized:
        phase = "Pending"
    else:
        phase = pod_phase(pod, statuses, terminal)
    if evicted is not None:
        phase = "Failed"
    sandbox = state.sandbox
    pod_ip = state.pod_ip(pod.host_network, host_ip)
    adopted = _times_from_runtime(pod, state, start_time) if now is None else {}

    def condition(kind: str, outcome: conditions.Outcome) -> dict[str, Any]:
        return _condition(kind, outcome, rfc3339((outcome[0] and adopted.get(kind)) or now or start_time) or "")

    others = conditions.not_ours(pod)
    containers_ready = conditions.containers_ready(pod, init_statuses, statuses, phase)
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": [
            condition("PodReadyToStartContainers", (bool(sandbox and sandbox.ready), "", "")),
            condition("Initialized", conditions.initialized(pod, init_statuses, statuses, phase)),
            condition("Ready", conditions.ready(pod, containers_ready, others)),
            condition("ContainersReady", containers_ready),
            condition("PodScheduled", (True, "", "")),
            *others,
        ],
        "hostIP": host_ip,
        "startTime": rfc3339(start_time),
        "containerStatuses": statuses,
        "qosClass": qos_class(pod),
    }
    if evicted is not None:
        status["reason"], status["message"] = evicted
    if init_statuses:
        status["initContainerStatuses"] = init_statuses
    if pod.ephemeral_containers:
        status["ephemeralContainerStatuses"] = [_ephemeral_status(pod, c.name, c.image, state, waiting.get(c.name))
                                                for c in pod.ephemeral_containers]
    if host_ip:
        status["hostIPs"] = [{"ip": host_ip}]
    if pod_ip:
        status["podIP"] = pod_ip
        status["podIPs"] = [{"ip": pod_ip}]
    return status
