"""What one sync must do to a pod, computed from its spec and what the runtime holds.

Pure logic (the kubelet's computePodActions): no I/O, so every rule here has a unit test.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pykubelet.api.pod import Container, Pod
from pykubelet.runtime.specs import spec_changed
from pykubelet.runtime.state import CREATED, EXITED, RUNNING, UNKNOWN, ContainerState, PodRuntimeState


@dataclass
class PodActions:
    kill_pod: bool = False
    """Stop every container and sandbox first (the sandbox is being replaced or the pod is done)."""
    create_sandbox: bool = False
    sandbox_id: str = ""
    """The ready sandbox to start containers in, when it is kept."""
    attempt: int = 0
    """The sandbox attempt number (kept or new)."""
    start: list[str] = field(default_factory=list)
    """Names of containers to (re)start, in spec order."""
    kill: dict[str, str] = field(default_factory=dict)
    """Container ID -> why it is stopped."""

    def is_noop(self) -> bool:
        return not (self.kill_pod or self.create_sandbox or self.start or self.kill)


def should_restart(container_state: ContainerState | None, restart_policy: str) -> bool:
    """Whether a container that is not running should be started (again)."""
    if container_state is None:
        return True
    if container_state.state == RUNNING:
        return False
    if container_state.state in (UNKNOWN, CREATED):
        return True  # never really ran, or we cannot tell
    if restart_policy == "Never":
        return False
    if restart_policy == "OnFailure" and container_state.exit_code == 0:
        return False
    return True


def _is_running(c: ContainerState | None) -> bool:
    return c is not None and c.state in (RUNNING, UNKNOWN)


def _needs_start_in_new_sandbox(pod: Pod, container: Container, state: PodRuntimeState) -> bool:
    latest = state.latest(container.name)
    return not (pod.restart_policy == "OnFailure" and latest is not None
                and latest.state not in (RUNNING, UNKNOWN, CREATED) and latest.exit_code == 0)


def compute_pod_actions(pod: Pod, state: PodRuntimeState, unhealthy: dict[str, str] | None = None,
                        unstarted: frozenset[str] | set[str] = frozenset()) -> PodActions:
    """`unhealthy`: container ID -> why its liveness or startup probe gave up; `unstarted`: IDs of
    running containers whose startup probe has not succeeded yet."""
    unhealthy = unhealthy or {}
    sandbox = state.sandboxes[0] if state.sandboxes else None
    something_alive = bool(state.running()) or any(s.ready for s in state.sandboxes)
    # More than one ready sandbox (a retried RunPodSandbox that also succeeded): start over.
    extra_ready = sum(s.ready for s in state.sandboxes) > 1

    if sandbox is None or not sandbox.ready or extra_ready:
        attempt = sandbox.attempt + 1 if sandbox else 0
        # A pod that must not restart keeps its dead sandbox once its containers have run.
        if pod.restart_policy == "Never" and sandbox is not None and state.containers:
            return PodActions(kill_pod=something_alive)
        if pod.init_containers:
            start = [pod.init_containers[0].name]  # init containers run again in a new sandbox
        else:
            start = [c.name for c in pod.containers if _needs_start_in_new_sandbox(pod, c, state)]
        if not start and sandbox is not None:
            return PodActions(kill_pod=something_alive)  # OnFailure and everything succeeded
        # Replacing a sandbox always stops the old ones too, so their network is torn down.
        return PodActions(kill_pod=sandbox is not None, create_sandbox=True, attempt=attempt, start=start)

    actions = PodActions(sandbox_id=sandbox.id, attempt=sandbox.attempt)
    wanted = {c.name for c in (*pod.init_containers, *pod.containers, *pod.ephemeral_containers)}
    if not _init_progress(pod, state, sandbox.id, actions, unstarted):
        # The sidecars already running are replaced during initialization too (a startup probe
        # that gave up before the next init container may start), as with the kubelet.
        for container in pod.init_containers:
            latest = state.latest(container.name)
            if container.is_sidecar and _is_running(latest):
                _replace_if_needed(pod, container, latest, sandbox.id, unhealthy, actions)
        _kill_unwanted(state, wanted, actions)
        return actions
    for container in (*(c for c in pod.init_containers if c.is_sidecar), *pod.containers):
        latest = state.latest(container.name)
        if not _is_running(latest):
            if should_restart(latest, "Always" if container.is_sidecar else pod.restart_policy):
                actions.start.append(container.name)
        else:
            _replace_if_needed(pod, container, latest, sandbox.id, unhealthy, actions)
    for container in pod.ephemeral_containers:
        if state.latest(container.name) is None:  # started once, in the running pod; never again
            actions.start.append(container.name)
    _kill_unwanted(state, wanted, actions)
    return actions


def _replace_if_needed(pod: Pod, container: Container, latest: ContainerState, sandbox_id: str,
                       unhealthy: dict[str, str], actions: PodActions) -> None:
    """A running container is killed and started again when its spec changed, it runs in an old
    sandbox, or its liveness or startup probe gave up (then restarted per restartPolicy)."""
    if spec_changed(latest.hash, latest.hash_without_resources, container):
        actions.kill[latest.id] = "Container definition changed"
    elif latest.sandbox_id != sandbox_id:
        actions.kill[latest.id] = "Container runs in an old sandbox"
    elif latest.id in unhealthy:
        actions.kill[latest.id] = unhealthy[latest.id]
        if pod.restart_policy == "Never" and not container.is_sidecar:
            return
    else:
        return
    actions.start.append(container.name)


def _kill_unwanted(state: PodRuntimeState, wanted: set[str], actions: PodActions) -> None:
    for c in state.running():
        if c.name not in wanted:
            actions.kill[c.id] = "Container is not in the pod spec"


def _init_progress(pod: Pod, state: PodRuntimeState, sandbox_id: str, actions: PodActions,
                   unstarted: frozenset[str] | set[str] = frozenset()) -> bool:
    """Walk the init containers in order; True once all are done (sidecars: running, and started
    by their startup probe: the next container waits for that, as with the kubelet).

    Otherwise the next one to (re)start, if any, is added to `actions`.
    """
    for container in pod.init_containers:
        latest = state.latest_in(container.name, sandbox_id)
        if container.is_sidecar:
            if not _is_running(latest):
                actions.start.append(container.name)
                return False
            if latest is not None and latest.id in unstarted:
                return False
            continue
        if _is_running(latest):
            return False  # still initializing
        if latest is not None and latest.state == EXITED and latest.exit_code == 0:
            continue
        if latest is not None and latest.state == EXITED and pod.restart_policy == "Never":
            return False  # failed for good: the pod is Failed
        actions.start.append(container.name)
        return False
    return True


def init_failed(pod: Pod, state: PodRuntimeState) -> bool:
    """An init container failed and restartPolicy Never forbids another try."""
    if pod.restart_policy != "Never" or not state.sandboxes:
        return False
    sandbox_id = state.sandboxes[0].id
    for container in pod.init_containers:
        latest = state.latest_in(container.name, sandbox_id)
        if not container.is_sidecar and latest is not None and latest.state == EXITED and latest.exit_code != 0:
            return True
    return False


def init_done(pod: Pod, state: PodRuntimeState, unstarted: frozenset[str] | set[str] = frozenset()) -> bool:
    if not pod.init_containers:
        return True
    if not state.sandboxes:
        return False
    return _init_progress(pod, state, state.sandboxes[0].id, PodActions(), unstarted)


def is_terminal(pod: Pod, state: PodRuntimeState) -> bool:
    """Every container ran and none will run again: the pod Succeeded or Failed for good."""
    if pod.restart_policy == "Always":
        return False
    if init_failed(pod, state):
        return True
    for container in pod.containers:
        latest = state.latest(container.name)
        if latest is None or _is_running(latest) or should_restart(latest, pod.restart_policy):
            return False
    return True
