"""The Pod status a user sees (kubectl's view), derived from spec + runtime state + last sync.

Pure logic following the kubelet: container states with lastState and restartCount, waiting
reasons from the last sync (CrashLoopBackOff, ErrImagePull...), phase, conditions, IPs. Whether
a container has started and is ready is not decided here: the container statuses are built
with both False and handed to one `readiness` call (the kubelet's prober manager
UpdatePodStatus); everything that depends on them (init done, phase, conditions) is derived
from what it set.
"""

from __future__ import annotations

from typing import Callable, Iterable

from pykubelet.api.pod import Container, Pod
from pykubelet.api.pod_status import (
    CONTAINER_ID_SCHEME, Condition, ContainerState, ContainerStatus, PodCondition, PodStatus, Running, Terminated, Waiting,
)
from pykubelet.api.times import rfc3339
from pykubelet.pods import conditions, resize
from pykubelet.pods.actions import init_done, init_failed, should_restart
from pykubelet.probes.readiness import without_probe_results
from pykubelet.runtime.resources import qos_class, requests_and_limits
from pykubelet.runtime.state import EXITED, RUNNING, PodRuntimeState
from pykubelet.runtime.state import ContainerState as Instance

CONTAINER_CREATING = "ContainerCreating"
POD_INITIALIZING = "PodInitializing"
DISRUPTION_TARGET = "DisruptionTarget"

Readiness = Callable[[Pod, PodStatus], None]
"""Sets `started` and `ready` of every container status of the PodStatus it is handed, in place."""


def _terminated(c: Instance) -> Terminated:
    reason = c.reason or ("Completed" if c.exit_code == 0 else "Error")
    return Terminated(exit_code=c.exit_code, reason=reason, started_at=rfc3339(c.started_at) or "",
                      finished_at=rfc3339(c.finished_at) or "", container_id=CONTAINER_ID_SCHEME + c.id,
                      message=c.message)


def _state(c: Instance) -> ContainerState:
    if c.state == RUNNING:
        return Running(rfc3339(c.started_at) or "")
    if c.state == EXITED:
        return _terminated(c)
    return Waiting(CONTAINER_CREATING)


def container_status(pod: Pod, name: str, image: str, state: PodRuntimeState,
                     waiting: tuple[str, str] | None) -> ContainerStatus:
    """The container's status as the runtime and the last sync (`waiting`: its waiting reason
    and message) tell; not started, not ready (the readiness seam's to set)."""
    latest = state.latest(name)
    if latest is None:
        return ContainerStatus(name, image, Waiting(*(waiting or (CONTAINER_CREATING, ""))))
    status = ContainerStatus(name, image, _state(latest), image_id=latest.image_ref,
                             container_id=CONTAINER_ID_SCHEME + latest.id, restart_count=latest.restart_count)
    previous = state.previous(name)
    if previous is not None and previous.state == EXITED:
        status.last_state = _terminated(previous)
    if latest.state != RUNNING and waiting and should_restart(latest, pod.restart_policy):
        # It will run again: show why it waits, and keep what it exited with as lastState.
        if latest.state == EXITED:
            status.last_state = _terminated(latest)
        status.state = Waiting(*waiting)
    return status


def pod_phase(pod: Pod, statuses: list[ContainerStatus], terminal: bool = False) -> str:
    """The kubelet's getPhase over the app containers. A terminal pod (deleted, its containers
    stopped for good) that is not static is Succeeded or Failed whatever its restart policy."""
    running = waiting = stopped = succeeded = 0
    for status in statuses:
        if isinstance(status.state, Running):
            running += 1
        elif isinstance(status.state, Terminated):
            stopped += 1
            succeeded += status.state.exit_code == 0
        elif status.last_state is not None:  # waiting to run again after an exit
            stopped += 1
        else:
            waiting += 1
    if waiting:
        return "Pending"
    if running:
        return "Running"
    if stopped:
        if terminal and not pod.is_static:
            return "Succeeded" if stopped == succeeded else "Failed"
        if pod.restart_policy == "Always":
            return "Running"
        if stopped == succeeded:
            return "Succeeded"
        return "Failed" if pod.restart_policy == "Never" else "Running"
    return "Pending"


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


def _conditions(pod: Pod, state: PodRuntimeState, status: PodStatus, start_time: float,
                now: float | None) -> list[Condition]:
    adopted = _times_from_runtime(pod, state, start_time) if now is None else {}

    def stamped(kind: str, outcome: conditions.Outcome) -> PodCondition:
        when = (outcome.true and adopted.get(kind)) or now or start_time
        return PodCondition(kind, outcome.true, rfc3339(when) or "", outcome.reason, outcome.message,
                            status.observed_generation)

    sandbox = state.sandbox
    inits, apps = status.init_container_statuses, status.container_statuses
    others = conditions.not_ours(pod)
    containers_ready = conditions.containers_ready(pod, inits, apps, status.phase)
    return [
        stamped("PodReadyToStartContainers", conditions.Outcome(bool(sandbox and sandbox.ready))),
        stamped("Initialized", conditions.initialized(pod, inits, apps, status.phase)),
        stamped("Ready", conditions.ready(pod, containers_ready, others)),
        stamped("ContainersReady", containers_ready),
        stamped("PodScheduled", conditions.Outcome(True)),
        *others,
    ]


def _report_resources(pod: Pod, state: PodRuntimeState, status: PodStatus) -> None:
    """allocatedResources and resources of each regular and init container (`pod` carries the
    allocated resources: pods/resize.py)."""
    by_name = {c.name: c for c in resize.resizable_containers(pod)}
    for container_status_ in (*status.init_container_statuses, *status.container_statuses):
        container = by_name[container_status_.name]
        requests, limits = requests_and_limits(container)
        amounts = {"requests": {k: str(v) for k, v in requests.items()},
                   "limits": {k: str(v) for k, v in limits.items()}}
        latest = state.latest(container.name)
        container_status_.allocated_resources = amounts["requests"] or None
        container_status_.resources = resize.status_resources(
            amounts, latest.resources if latest else None, container_status_.running) or None


def pod_status(pod: Pod, state: PodRuntimeState, waiting: dict[str, tuple[str, str]],
               host_ip: str, start_time: float, readiness: Readiness = without_probe_results,
               now: float | None = None, terminal: bool = False,
               evicted: tuple[str, str] | None = None, disrupted: bool = False) -> PodStatus:
    """The status as of `now`: conditions are stamped with it (the status manager keeps the
    earlier time of a condition that did not change). `now` None: the pod was running before
    this agent looked, so True conditions get the runtime's times (sandbox created, containers
    started) instead. `terminal`: the pod's containers were stopped for good (pod_phase).
    `evicted`: (reason, message) of a pod this node failed for good (its active deadline).
    `disrupted`: the node failed it (an eviction, a node shutdown): condition DisruptionTarget
    (reason TerminationByKubelet, the eviction's message) replaces any other of that type."""
    def statuses(containers: Iterable[Container]) -> list[ContainerStatus]:
        return [container_status(pod, c.name, c.image, state, waiting.get(c.name)) for c in containers]

    status = PodStatus(phase="Pending", container_statuses=statuses(pod.containers),
                       init_container_statuses=statuses(pod.init_containers),
                       ephemeral_container_statuses=statuses(pod.ephemeral_containers),
                       host_ip=host_ip, pod_ip=state.pod_ip(pod.host_network, host_ip),
                       start_time=rfc3339(start_time) or "", qos_class=qos_class(pod),
                       observed_generation=pod.generation)
    for ephemeral in status.ephemeral_container_statuses:
        ephemeral.started = None  # no probes to say so: not reported (the kubelet's)
    _report_resources(pod, state, status)
    readiness(pod, status)
    # A sidecar the next init container waits for: running, but not started by its probes yet.
    unstarted = {s.runtime_id for s in status.init_container_statuses if s.running and not s.started}
    initialized = init_done(pod, state, unstarted)
    if not initialized:  # containers that have not run yet wait for initialization to end
        for waiter in (*status.init_container_statuses, *status.container_statuses):
            if waiter.name not in waiting and state.latest(waiter.name) is None:
                waiter.state = Waiting(POD_INITIALIZING)
    if init_failed(pod, state) or evicted is not None:
        status.phase = "Failed"
    elif initialized:
        status.phase = pod_phase(pod, status.container_statuses, terminal)
    if evicted is not None:
        status.reason, status.message = evicted
    status.conditions = _conditions(pod, state, status, start_time, now)
    if evicted is not None and disrupted:
        status.conditions = [c for c in status.conditions if c.type != DISRUPTION_TARGET] + [PodCondition(
            DISRUPTION_TARGET, True, rfc3339(now or start_time) or "", "TerminationByKubelet", evicted[1],
            status.observed_generation)]
    return status
