"""requests/limits -> QoS class and the CRI's Linux resources, with the kubelet's arithmetic."""

from __future__ import annotations

from typing import Any

from pykubelet.api.pod import Container, Pod
from pykubelet.api.quantity import cpu_millis, quantity_bytes
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.runtime import swap as node_swap

GUARANTEED, BURSTABLE, BEST_EFFORT = "Guaranteed", "Burstable", "BestEffort"
MIN_SHARES, MAX_SHARES, SHARES_PER_CPU, QUOTA_PERIOD = 2, 262_144, 1024, 100_000
MIN_QUOTA = 1000
GUARANTEED_OOM_SCORE_ADJ, BEST_EFFORT_OOM_SCORE_ADJ = -997, 1000
SYSTEM_NODE_CRITICAL, SYSTEM_CRITICAL_PRIORITY = "system-node-critical", 2_000_000_000


def requests_and_limits(container: Container) -> tuple[dict[str, Any], dict[str, Any]]:
    """A container's requests and limits as given (quantities), each missing request the limit."""
    spec = container.raw.get("resources") or {}
    # A null amount decodes as a zero quantity in the API: the same as none here.
    limits = {name: value for name, value in (spec.get("limits") or {}).items() if value is not None}
    requests = {name: value for name, value in (spec.get("requests") or {}).items() if value is not None}
    for name, value in limits.items():
        requests.setdefault(name, value)  # the API defaults a missing request to the limit
    return requests, limits


def _positive(values: dict[str, Any]) -> dict[str, int]:
    """cpu (millicores) and memory (bytes) greater than zero: what ComputePodQOS counts."""
    amounts = {"cpu": cpu_millis(values.get("cpu", 0)), "memory": quantity_bytes(values.get("memory", 0))}
    return {name: amount for name, amount in amounts.items() if amount > 0}


def qos_class(pod: Pod) -> str:
    """Guaranteed: every container limits cpu and memory, the pod's requests equal its limits;
    BestEffort: nobody asks for anything above zero; Burstable: the rest."""
    requests: dict[str, int] = {}
    limits: dict[str, int] = {}
    guaranteed = True
    for container in pod.containers:
        container_requests, container_limits = (_positive(r) for r in requests_and_limits(container))
        for total, amounts in ((requests, container_requests), (limits, container_limits)):
            for name, amount in amounts.items():
                total[name] = total.get(name, 0) + amount
        if set(container_limits) != {"cpu", "memory"}:
            guaranteed = False
    if not requests and not limits:
        return BEST_EFFORT
    return GUARANTEED if guaranteed and requests == limits else BURSTABLE


def priority(pod: Pod) -> int:
    """spec.priority (set by the apiserver from the priority class); 0 without one."""
    value = (pod.raw.get("spec") or {}).get("priority")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def is_critical(pod: Pod) -> bool:
    """types.IsCriticalPod: static, mirror, or of system priority (2000000000 and up)."""
    return pod.is_static or pod.is_mirror or priority(pod) >= SYSTEM_CRITICAL_PRIORITY


def _is_node_critical(pod: Pod) -> bool:
    """types.IsNodeCriticalPod: a critical pod of the system-node-critical class."""
    return is_critical(pod) and (pod.raw.get("spec") or {}).get("priorityClassName") == SYSTEM_NODE_CRITICAL


def oom_score_adj(pod: Pod, container: Container, memory_capacity: int) -> int:
    if _is_node_critical(pod):
        return GUARANTEED_OOM_SCORE_ADJ
    qos = qos_class(pod)
    if qos == GUARANTEED:
        return GUARANTEED_OOM_SCORE_ADJ
    if qos == BEST_EFFORT:
        return BEST_EFFORT_OOM_SCORE_ADJ
    request = quantity_bytes(requests_and_limits(container)[0].get("memory", 0))
    score = 1000 - (1000 * request) // max(memory_capacity, 1)
    # never as protected as Guaranteed (floor 1000 + -997 = 3), never as exposed as BestEffort
    return int(min(max(score, 1000 + GUARANTEED_OOM_SCORE_ADJ), BEST_EFFORT_OOM_SCORE_ADJ - 1))


def _may_swap(pod: Pod, requests: dict[str, Any], limits: dict[str, Any]) -> bool:
    """LimitedSwap's conditions: a Burstable, non-critical pod; a memory request below the limit."""
    request, limit = quantity_bytes(requests.get("memory", 0)), quantity_bytes(limits.get("memory", 0))
    return qos_class(pod) == BURSTABLE and not is_critical(pod) and (request or limit) > 0 and request != limit


def linux_resources(pod: Pod, container: Container, memory_capacity: int,
                    swap: node_swap.SwapFacts | None = None) -> api.LinuxContainerResources:
    """`swap`: the node's swap facts; None configures no swap limit (the runtime's default)."""
    requests, limits = requests_and_limits(container)
    cpu_request = cpu_millis(requests.get("cpu", 0))
    shares = min(MAX_SHARES, max(MIN_SHARES, cpu_request * SHARES_PER_CPU // 1000)) if cpu_request else MIN_SHARES
    resources = api.LinuxContainerResources(cpu_shares=shares,
                                            oom_score_adj=oom_score_adj(pod, container, memory_capacity))
    if cpu_millis(limits.get("cpu", 0)):  # MilliCPUToQuota(0) is 0: no quota
        resources.cpu_period = QUOTA_PERIOD
        resources.cpu_quota = max(MIN_QUOTA, cpu_millis(limits["cpu"]) * QUOTA_PERIOD // 1000)
    if "memory" in limits:
        resources.memory_limit_in_bytes = quantity_bytes(limits["memory"])
    if swap is not None:
        node_swap.configure(resources, swap, _may_swap(pod, requests, limits),
                            quantity_bytes(requests.get("memory", 0)))
    return resources


def pod_cgroup_resources(pod: Pod) -> api.LinuxContainerResources:
    """The pod cgroup's limits, as the kubelet's ResourceConfigForPod sets them: CPU shares from
    the pod's CPU request; a CFS quota only when every container limits CPU, a memory limit only
    when every container limits memory (else a container could outgrow its siblings' share).

    The pod needs the larger of what its app containers and sidecars use together and what
    its biggest init container uses alone.
    """
    regular_inits = [c for c in pod.init_containers if not c.is_sidecar]
    together = [*(c for c in pod.init_containers if c.is_sidecar), *pod.containers]
    everyone = [*regular_inits, *together]

    def amount(kind: str, which: int, parse) -> int:
        def of(c: Container) -> int:
            return parse(requests_and_limits(c)[which].get(kind, 0))
        return max(sum(of(c) for c in together), max((of(c) for c in regular_inits), default=0))

    resources = api.LinuxContainerResources()
    if qos_class(pod) == BEST_EFFORT:
        resources.cpu_shares = MIN_SHARES
        return resources
    cpu_request = amount("cpu", 0, cpu_millis)
    resources.cpu_shares = min(MAX_SHARES, max(MIN_SHARES, cpu_request * SHARES_PER_CPU // 1000))
    if all("cpu" in requests_and_limits(c)[1] for c in everyone):
        resources.cpu_period = QUOTA_PERIOD
        resources.cpu_quota = max(MIN_QUOTA, amount("cpu", 1, cpu_millis) * QUOTA_PERIOD // 1000)
    if all("memory" in requests_and_limits(c)[1] for c in everyone):
        resources.memory_limit_in_bytes = amount("memory", 1, quantity_bytes)
    return resources
