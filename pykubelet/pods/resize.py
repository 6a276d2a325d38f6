"""In-place pod resize, the deciding part: a pod's allocated resources, whether a resize may be
allocated on this node, and what a sync must do to the running containers.

Pure logic after the kubelet's allocation manager (admission of a resize) and its runtime
manager's computePodResizeAction. Only cpu and memory are resized. A container runs with its
pod's *allocated* resources: the spec's until a resize is admitted, after that the new ones;
what was last applied to each running container is its *actuated* record, and a running
container whose allocated resources differ from that record is resized.
"""

from __future__ import annotations

import copy
import json
import dataclasses
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from pykubelet.api.pod import Container, Pod
from pykubelet.api.quantity import cpu_millis, quantity_bytes
from pykubelet.pods.admission import Allocatable, resources_fit
from pykubelet.runtime.resources import MIN_SHARES, SHARES_PER_CPU, requests_and_limits
from pykubelet.runtime.state import RUNNING, ActualResources, PodRuntimeState

RESIZABLE = ("cpu", "memory")
DEFERRED, INFEASIBLE, ERROR = "Deferred", "Infeasible", "Error"
PENDING_CONDITION, IN_PROGRESS_CONDITION = "PodResizePending", "PodResizeInProgress"
NOT_REQUIRED, RESTART_CONTAINER = "NotRequired", "RestartContainer"
MIN_MILLI_CPU_LIMIT = 10  # a CFS quota at or below this is shown as allocated, not as read back

Amounts = dict[str, dict[str, str]]
"""One container's cpu/memory {"requests": {...}, "limits": {...}}, quantities as the API wrote them."""
PodAllocation = dict[str, Amounts]
"""Container name -> its amounts (regular and init containers: both are resizable in v1.36)."""


@dataclass(frozen=True)
class Numeric:
    """One container's resizable amounts as numbers (millicores, bytes); 0 is unset."""

    cpu_request: int = 0
    cpu_limit: int = 0
    memory_request: int = 0
    memory_limit: int = 0


def numeric(amounts: Amounts) -> Numeric:
    requests, limits = amounts.get("requests", {}), amounts.get("limits", {})
    return Numeric(cpu_millis(requests.get("cpu", 0)), cpu_millis(limits.get("cpu", 0)),
                   quantity_bytes(requests.get("memory", 0)), quantity_bytes(limits.get("memory", 0)))


def container_amounts(container: Container) -> Amounts:
    requests, limits = requests_and_limits(container)
    return {"requests": {k: str(v) for k, v in requests.items() if k in RESIZABLE},
            "limits": {k: str(v) for k, v in limits.items() if k in RESIZABLE}}


def resizable_containers(pod: Pod) -> tuple[Container, ...]:
    return (*pod.init_containers, *pod.containers)


def allocation_of(pod: Pod) -> PodAllocation:
    """What the spec asks for: the allocation of a newly admitted pod, and a resize's target."""
    return {c.name: container_amounts(c) for c in resizable_containers(pod)}


def _with_amounts(container: Container, amounts: Amounts) -> Container:
    resources = copy.deepcopy(container.raw.get("resources") or {})
    for kind in ("requests", "limits"):
        kept = {k: v for k, v in (resources.get(kind) or {}).items() if k not in RESIZABLE}
        kept.update(amounts.get(kind, {}))
        if kept:
            resources[kind] = kept
        else:
            resources.pop(kind, None)
    amount = numeric(amounts)
    return dataclasses.replace(container, raw={**container.raw, "resources": resources},
                               cpu_request_millis=amount.cpu_request, memory_request_bytes=amount.memory_request)


def with_allocation(pod: Pod, allocation: Mapping[str, Amounts]) -> Pod:
    """The pod as it runs here: each container with its allocated cpu and memory."""
    def swap(containers: tuple[Container, ...]) -> tuple[Container, ...]:
        # A container already at its allocation is kept as it is (its spec's hash with it).
        return tuple(_with_amounts(c, allocation[c.name])
                     if c.name in allocation and numeric(allocation[c.name]) != numeric(container_amounts(c)) else c
                     for c in containers)
    return dataclasses.replace(pod, containers=swap(pod.containers), init_containers=swap(pod.init_containers))


@dataclass(frozen=True)
class Pending:
    """Why a resize waits: Deferred (it may fit later) or Infeasible (it never will here)."""

    reason: str
    message: str


def admit_resize(desired: Pod, others: Iterable[Pod], allocatable: Allocatable) -> Pending | None:
    """None if the desired resources fit next to the other pods' allocated ones. As in the
    kubelet v1.36, every refusal of the resource fit is Deferred, also one beyond what the node
    has at all (its message says by how much)."""
    rejection = resources_fit(desired, list(others), allocatable)
    return Pending(DEFERRED, rejection.message) if rejection is not None else None


@dataclass(frozen=True)
class ContainerUpdate:
    name: str
    container_id: str
    desired: Numeric
    current: Numeric


@dataclass
class ResizePlan:
    """What a sync does to resize the running containers."""

    restart: dict[str, str] = field(default_factory=dict)
    """Container ID -> why it is stopped (to start again with its new resources)."""
    restart_names: list[str] = field(default_factory=list)
    updates: dict[str, list[ContainerUpdate]] = field(default_factory=lambda: {"memory": [], "cpu": []})
    """Per resource, the containers whose cgroup is updated in place, decreases first."""

    def is_noop(self) -> bool:
        return not self.restart and not any(self.updates.values())


def _policy(container: Container, resource: str) -> str:
    for entry in container.raw.get("resizePolicy") or []:
        if isinstance(entry, dict) and entry.get("resourceName") == resource:
            return entry.get("restartPolicy") or NOT_REQUIRED
    return NOT_REQUIRED  # no policy: the API's implicit default


def compute_resize(pod: Pod, state: PodRuntimeState, actuated: Mapping[str, Amounts]) -> ResizePlan:
    """`pod` with its allocated resources; `actuated`: container name -> what was last applied.

    Only running containers of the current sandbox are resized. A container with no actuated
    record was started by an agent that kept none, with the resources its spec had then (that
    agent replaced a container whose resources changed): it is taken as running its allocated
    ones."""
    plan = ResizePlan()
    sandbox = state.sandbox
    if sandbox is None or not sandbox.ready:
        return plan
    for container in resizable_containers(pod):
        latest = state.latest_in(container.name, sandbox.id)
        if latest is None or latest.state != RUNNING or container.name not in actuated:
            continue
        desired, current = numeric(container_amounts(container)), numeric(actuated[container.name])
        if desired == current:
            continue
        changed = {"memory": (desired.memory_limit, current.memory_limit)
                   if desired.memory_limit != current.memory_limit else (desired.memory_request, current.memory_request),
                   "cpu": (desired.cpu_limit, current.cpu_limit)
                   if desired.cpu_limit != current.cpu_limit else (desired.cpu_request, current.cpu_request)}
        changed = {r: values for r, values in changed.items() if values[0] != values[1]}
        if any(_policy(container, r) == RESTART_CONTAINER for r in changed):
            plan.restart[latest.id] = f"Container {container.name} resize requires restart"
            plan.restart_names.append(container.name)
            continue
        for resource, (want, have) in changed.items():
            update = ContainerUpdate(container.name, latest.id, desired, current)
            # Decreases go first, so the increases after them find the room they free.
            plan.updates[resource].insert(0, update) if want < have else plan.updates[resource].append(update)
    return plan


def millicores(millis: int) -> str:
    """A CPU amount as the API writes it: "300m", "1" (Go's canonical DecimalSI)."""
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def binary_bytes(amount: int) -> str:
    """Bytes as the API writes them: "128Mi", "1000" (Go's canonical BinarySI: the largest
    power of 1024 the amount is a whole multiple of)."""
    for suffix, size in (("Ei", 1 << 60), ("Pi", 1 << 50), ("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20),
                         ("Ki", 1 << 10)):
        if amount and amount % size == 0:
            return f"{amount // size}{suffix}"
    return str(amount)


def _shares_to_millis(shares: int) -> int:
    return -(-shares * 1000 // SHARES_PER_CPU) if shares >= MIN_SHARES else 0


def status_resources(allocated: Amounts, actual: ActualResources | None, running: bool) -> Amounts:
    """containerStatuses[].resources: the allocated amounts, for a running container overridden
    by what the runtime reads back (a CPU limit from its quota, a request from its shares, the
    memory limit); values at or below the smallest the kernel takes stay as allocated."""
    out: Amounts = {k: dict(v) for k, v in allocated.items() if v}
    if not running or actual is None:
        return out
    limits, requests = out.get("limits"), out.get("requests")
    allocated_numbers = numeric(allocated)
    if limits is not None:
        cpu_limit = actual.cpu_quota * 1000 // actual.cpu_period if actual.cpu_period > 0 and actual.cpu_quota > 0 else 0
        if cpu_limit and (cpu_limit > MIN_MILLI_CPU_LIMIT or allocated_numbers.cpu_limit > MIN_MILLI_CPU_LIMIT):
            limits["cpu"] = millicores(cpu_limit)
        if actual.memory_limit_bytes > 0:
            limits["memory"] = binary_bytes(actual.memory_limit_bytes)
    if requests is not None:
        cpu_request = _shares_to_millis(actual.cpu_shares)
        if cpu_request and (cpu_request > MIN_SHARES or allocated_numbers.cpu_request > MIN_SHARES):
            requests["cpu"] = millicores(cpu_request)
    return out



def event_message(prefix: str, pod: Pod, generation: int, error: str = "") -> str:
    """The kubelet's resize Event text: `<prefix>: {"containers":[{"name":..,"resources":..}],
    "generation":N[,"error":..]}` with each container's resources as its spec has them."""
    def entry(c: Container) -> dict[str, object]:
        resources = c.raw.get("resources") or {}
        return {"name": c.name, "resources": {k: resources[k] for k in ("limits", "requests") if resources.get(k)}}
    summary: dict[str, object] = {}
    if pod.init_containers:
        summary["initContainers"] = [entry(c) for c in pod.init_containers]
    summary["containers"] = [entry(c) for c in pod.containers]
    summary["generation"] = generation
    if error:
        summary["error"] = error
    return f"{prefix}: {json.dumps(summary, separators=(',', ':'))}"
