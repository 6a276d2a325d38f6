"""requests/limits -> QoS class and the CRI's Linux resources, with the kubelet's arithmetic."""

from __future__ import annotations

from typing import Any

from pykubelet.api.pod import Container, Pod
from pykubelet.api.quantity import cpu_millis, quantity_bytes
from pykubelet.cri.v1 import api_pb2 as api

GUARANTEED, BURSTABLE, BEST_EFFORT = "Guaranteed", "Burstable", "BestEffort"
MIN_SHARES, SHARES_PER_CPU, QUOTA_PERIOD = 2, 1024, 100_000
MIN_QUOTA = 1000
GUARANTEED_OOM_SCORE_ADJ, BEST_EFFORT_OOM_SCORE_ADJ = -997, 1000


def _resources(container: Container) -> tuple[dict[str, Any], dict[str, Any]]:
    spec = container.raw.get("resources") or {}
    limits = dict(spec.get("limits") or {})
    requests = dict(spec.get("requests") or {})
    for name, value in limits.items():
        requests.setdefault(name, value)  # the API defaults a missing request to the limit
    return requests, limits


def qos_class(pod: Pod) -> str:
    """Guaranteed: every container limits cpu and memory, requests equal to limits;
    BestEffort: nobody asks for anything; Burstable: the rest."""
    any_set = False
    guaranteed = True
    for container in pod.containers:
        requests, limits = _resources(container)
        for name in ("cpu", "memory"):
            if name in requests or name in limits:
                any_set = True
            if name not in limits or requests.get(name) != limits.get(name):
                guaranteed = False
    if not any_set:
        return BEST_EFFORT
    return GUARANTEED if guaranteed else BURSTABLE


def oom_score_adj(pod: Pod, container: Container, memory_capacity: int) -> int:
    qos = qos_class(pod)
    if qos == GUARANTEED:
        return GUARANTEED_OOM_SCORE_ADJ
    if qos == BEST_EFFORT:
        return BEST_EFFORT_OOM_SCORE_ADJ
    request = quantity_bytes(_resources(container)[0].get("memory", 0))
    score = 1000 - (1000 * request) // max(memory_capacity, 1)
    return int(min(max(score, 2), 999))  # never as protected as Guaranteed, never as exposed as BestEffort


def linux_resources(pod: Pod, container: Container, memory_capacity: int) -> api.LinuxContainerResources:
    requests, limits = _resources(container)
    cpu_request = cpu_millis(requests.get("cpu", 0))
    shares = max(MIN_SHARES, cpu_request * SHARES_PER_CPU // 1000) if cpu_request else MIN_SHARES
    resources = api.LinuxContainerResources(cpu_shares=shares,
                                            oom_score_adj=oom_score_adj(pod, container, memory_capacity))
    if "cpu" in limits:
        resources.cpu_period = QUOTA_PERIOD
        resources.cpu_quota = max(MIN_QUOTA, cpu_millis(limits["cpu"]) * QUOTA_PERIOD // 1000)
    if "memory" in limits:
        resources.memory_limit_in_bytes = quantity_bytes(limits["memory"])
    return resources
