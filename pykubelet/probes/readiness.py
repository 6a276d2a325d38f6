"""How the probes' results become the `started` and `ready` of a pod's container statuses.

The one seam between probing and pod status (the kubelet's prober manager UpdatePodStatus): the
status code builds the container statuses from the runtime, hands the PodStatus here (through
ProbeManager.update_pod_status), then derives the pod's conditions from what this set. Pure:
everything it needs is passed in.

An agent restart must not make a Ready pod NotReady (every Service would drop its endpoints
for a probe period): a container that was already running before the agent started and has no
readiness result yet keeps the readiness the apiserver last heard for its pod, and one whose
last reported status said it had started stays started (the kubelet's behaviour while its
ChangeContainerStatusOnKubeletRestart gate is off).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from pykubelet.api.pod import Container, Pod
from pykubelet.api.pod_status import CONTAINER_ID_SCHEME, ContainerStatus, PodStatus, Running, Terminated
from pykubelet.api.times import seconds_from_rfc3339

RESTART_GRACE_SECONDS = 10
"""A container started this long before the agent did was running across the agent's restart."""


@dataclass(frozen=True)
class ProbeResults:
    """What one container's probes have concluded so far; None: no result yet."""

    started: bool | None = None
    ready: bool | None = None


def ran_before_agent(started_at: float, agent_started_at: float) -> bool:
    """Did a container started at `started_at` run across the agent's (re)start?"""
    return 0 < started_at < agent_started_at - RESTART_GRACE_SECONDS


def reported_started(pod: Pod, name: str, container_id: str) -> bool:
    """Did the status the apiserver holds say this very container (same ID) had started?"""
    status = pod.raw.get("status")
    if not isinstance(status, dict):
        return False
    for key in ("containerStatuses", "initContainerStatuses"):
        for entry in status.get(key) or []:
            if (isinstance(entry, dict) and entry.get("name") == name and entry.get("started") is True
                    and entry.get("containerID") == CONTAINER_ID_SCHEME + container_id):
                return True
    return False


def reported_ready(pod: Pod) -> bool:
    """Is the pod's Ready condition True in the status the apiserver holds?"""
    status = pod.raw.get("status")
    conditions: Any = status.get("conditions") if isinstance(status, dict) else None
    return any(isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True"
               for c in conditions or [])


def _across_restart(status: ContainerStatus, agent_started_at: float) -> bool:
    return isinstance(status.state, Running) and ran_before_agent(
        seconds_from_rfc3339(status.state.started_at), agent_started_at)


def _started(pod: Pod, spec: Container | None, status: ContainerStatus, result: ProbeResults | None,
             agent_started_at: float) -> bool:
    if not status.running:
        return False
    if result is not None and result.started is not None:
        return result.started
    if _across_restart(status, agent_started_at) and reported_started(pod, status.name, status.runtime_id):
        return True
    return spec is None or spec.startup_probe is None  # a startup probe that has not passed yet


def _ready(pod: Pod, spec: Container | None, status: ContainerStatus, result: ProbeResults | None,
           agent_started_at: float) -> bool:
    if not status.running:
        return False
    if result is not None and result.ready:
        return True
    has_probe = spec is not None and spec.readiness_probe is not None
    if (result is None or result.ready is None) and _across_restart(status, agent_started_at):
        return not has_probe or reported_ready(pod)
    return not has_probe


def _set(pod: Pod, spec: Container | None, status: ContainerStatus, results: Mapping[str, ProbeResults],
         agent_started_at: float) -> None:
    result = results.get(status.runtime_id)
    status.started = _started(pod, spec, status, result, agent_started_at)
    status.ready = status.started and _ready(pod, spec, status, result, agent_started_at)


def update_pod_status(pod: Pod, status: PodStatus, results: Mapping[str, ProbeResults],
                      agent_started_at: float) -> None:
    """Set started/ready on every container status of `status`, in place.

    `results`: container ID (without scheme) -> what its probes concluded; `agent_started_at`:
    when the probe manager was created (the agent's start), in seconds since the epoch."""
    specs = {c.name: c for c in (*pod.init_containers, *pod.containers)}
    for container in status.container_statuses:
        _set(pod, specs.get(container.name), container, results, agent_started_at)
    for container in status.init_container_statuses:
        spec = specs.get(container.name)
        if spec is not None and spec.is_sidecar:
            _set(pod, spec, container, results, agent_started_at)
        else:  # an init container is ready once it has finished successfully, not while it runs
            container.started = _started(pod, spec, container, results.get(container.runtime_id), agent_started_at)
            container.ready = isinstance(container.state, Terminated) and container.state.exit_code == 0
    for container in status.ephemeral_container_statuses:
        container.ready, container.started = False, None  # never probed, never ready


def without_probe_results(pod: Pod, status: PodStatus) -> None:
    """update_pod_status before any probe concluded anything (no prober: the status code's default)."""
    update_pod_status(pod, status, {}, 0.0)
