"""requests/limits -> the pod's QoS class and the container's cgroup settings (cpu shares, CFS quota,
memory limit, OOM score), with the kubelet's arithmetic (MilliCPUToShares, MilliCPUToQuota,
GetContainerOOMScoreAdjust)."""

from __future__ import annotations

from typing import Any

import pytest

from pykubelet.api.pod import CONFIG_SOURCE_ANNOTATION, Pod, parse_pod
from pykubelet.runtime.resources import BEST_EFFORT, BURSTABLE, GUARANTEED, linux_resources, oom_score_adj, qos_class

GI = 2**30
MI = 2**20
NODE_MEMORY = 8 * GI


def resources(requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if requests is not None:
        out["requests"] = requests
    if limits is not None:
        out["limits"] = limits
    return out


def make_pod(*per_container: dict[str, Any], annotations: dict[str, str] | None = None,
             spec: dict[str, Any] | None = None) -> Pod:
    containers = [{"name": f"c{i}", "image": "busybox:1.36", "resources": r} for i, r in enumerate(per_container)]
    return parse_pod({"metadata": {"name": "p", "uid": "uid-p", "annotations": annotations or {}},
                      "spec": {"containers": containers, **(spec or {})}}, where="test")


def linux(requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None,
          memory_capacity: int = NODE_MEMORY):
    pod = make_pod(resources(requests, limits))
    return linux_resources(pod, pod.containers[0], memory_capacity)


BOTH = {"cpu": "500m", "memory": "256Mi"}


# --- QoS class ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("per_container, expected", [
    ([resources()], BEST_EFFORT),
    ([resources(), resources()], BEST_EFFORT),
    ([resources(limits=BOTH)], GUARANTEED),                          # requests default to limits
    ([resources(requests=BOTH, limits=BOTH)], GUARANTEED),
    ([resources(limits=BOTH), resources(requests=BOTH, limits=BOTH)], GUARANTEED),
    ([resources(requests={"cpu": "100m"})], BURSTABLE),              # only a request
    ([resources(requests={"memory": "64Mi"})], BURSTABLE),
    ([resources(limits={"cpu": "1"})], BURSTABLE),                   # no memory limit
    ([resources(limits={"memory": "1Gi"})], BURSTABLE),              # no cpu limit
    ([resources(requests={"cpu": "250m", "memory": "256Mi"}, limits=BOTH)], BURSTABLE),  # request below limit
    ([resources(limits=BOTH), resources()], BURSTABLE),              # one container asks for nothing
    ([resources(limits=BOTH), resources(requests={"cpu": "100m"})], BURSTABLE),
])
def test_qos_class_follows_requests_and_limits(per_container, expected):
    assert qos_class(make_pod(*per_container)) == expected


@pytest.mark.parametrize("per_container", [
    [resources(limits={"cpu": "1", "memory": "1Gi", "ephemeral-storage": "1Gi"})],
    [resources(requests={"cpu": "1", "memory": "1Gi", "ephemeral-storage": "100Mi"},
               limits={"cpu": "1", "memory": "1Gi", "ephemeral-storage": "1Gi"})],
])
def test_only_cpu_and_memory_decide_the_qos_class(per_container):
    assert qos_class(make_pod(*per_container)) == GUARANTEED


@pytest.mark.parametrize("requests, limits", [
    ({"cpu": "1", "memory": "1Gi"}, {"cpu": "1000m", "memory": "1Gi"}),
    ({"cpu": "500m", "memory": "1024Mi"}, {"cpu": "0.5", "memory": "1Gi"}),
    ({"cpu": 1, "memory": "1Gi"}, {"cpu": "1", "memory": str(GI)}),
], ids=["1-vs-1000m", "1024Mi-vs-1Gi", "number-vs-string"])
def test_equal_requests_and_limits_written_differently_are_guaranteed(requests, limits):
    """The kubelet compares quantities (Quantity.Cmp), not how they are spelled."""
    assert qos_class(make_pod(resources(requests, limits))) == GUARANTEED


@pytest.mark.parametrize("per_container, expected", [
    ([resources(requests={"cpu": "0", "memory": "0"})], BEST_EFFORT),
    ([resources(requests={"cpu": "0"}, limits={"cpu": "0"})], BEST_EFFORT),
    ([resources(requests={"cpu": "0", "memory": "64Mi"})], BURSTABLE),
], ids=["zero-requests", "zero-request-and-limit", "zero-cpu-some-memory"])
def test_zero_quantities_count_as_not_set(per_container, expected):
    """ComputePodQOS only counts quantities greater than zero."""
    assert qos_class(make_pod(*per_container)) == expected


# --- cpu shares and quota ----------------------------------------------------------------------------

@pytest.mark.parametrize("requests, limits, shares", [
    (None, None, 2),                       # no request: the minimum
    ({"cpu": "1"}, None, 1024),
    ({"cpu": "500m"}, None, 512),
    ({"cpu": "250m"}, None, 256),
    ({"cpu": "100m"}, None, 102),          # 102.4 truncated
    ({"cpu": "2.5"}, None, 2560),
    ({"cpu": "1m"}, None, 2),              # 1.024 -> floor of 2
    ({"cpu": "2m"}, None, 2),
    ({"cpu": "3m"}, None, 3),
    ({"cpu": "0"}, None, 2),
    (None, {"cpu": "750m"}, 768),          # the request defaults to the limit
    ({"cpu": "256"}, None, 262144),
    ({"cpu": "300"}, None, 262144),        # the kernel's maximum (MaxShares)
])
def test_cpu_shares_follow_the_request(requests, limits, shares):
    assert linux(requests, limits).cpu_shares == shares


@pytest.mark.parametrize("limit, quota", [
    ("1", 100_000),
    ("500m", 50_000),
    ("250m", 25_000),
    ("2", 200_000),
    ("1.5", 150_000),
    ("10m", 1_000),
    ("5m", 1_000),                         # at least 1ms per period
    ("1m", 1_000),
])
def test_cpu_limit_becomes_a_cfs_quota_over_100ms(limit, quota):
    r = linux(limits={"cpu": limit})
    assert (r.cpu_quota, r.cpu_period) == (quota, 100_000)


def test_no_cpu_limit_means_no_quota():
    assert linux(requests={"cpu": "1"}).cpu_quota == 0


def test_cpu_limit_of_zero_means_no_quota():
    """MilliCPUToQuota(0) is 0: the container is not throttled (not 1% of a CPU)."""
    assert linux(limits={"cpu": "0"}).cpu_quota == 0


@pytest.mark.parametrize("limit, size", [
    ("128Mi", 128 * MI),
    ("1Gi", GI),
    ("1G", 10**9),
    ("1.5Gi", 1536 * MI),
])
def test_memory_limit_is_the_cgroup_limit_in_bytes(limit, size):
    assert linux(limits={"memory": limit}).memory_limit_in_bytes == size


def test_no_memory_limit_leaves_memory_unlimited():
    assert linux(requests={"memory": "1Gi"}).memory_limit_in_bytes == 0


# --- OOM score -----------------------------------------------------------------------------------------

def test_guaranteed_containers_are_the_last_to_be_oom_killed():
    assert linux(limits=BOTH).oom_score_adj == -997


def test_best_effort_containers_are_the_first_to_be_oom_killed():
    assert linux().oom_score_adj == 1000


@pytest.mark.parametrize("memory_request, expected", [
    (NODE_MEMORY // 10, 901),              # just under a tenth: 99.99 truncated to 99
    (NODE_MEMORY // 2, 500),
    (NODE_MEMORY // 4, 750),
    (GI, 875),
    (100 * MI, 988),                       # 1000 - 12.2 truncated
    (1, 999),                              # 1000 would tie with BestEffort
])
def test_burstable_oom_score_shrinks_as_the_memory_request_grows(memory_request, expected):
    pod = make_pod(resources(requests={"memory": str(memory_request)}))
    assert oom_score_adj(pod, pod.containers[0], NODE_MEMORY) == expected


def test_burstable_without_a_memory_request_stays_just_below_best_effort():
    assert linux(requests={"cpu": "100m"}).oom_score_adj == 999


@pytest.mark.parametrize("memory_request", [NODE_MEMORY, NODE_MEMORY * 2, NODE_MEMORY - NODE_MEMORY // 1000],
                         ids=["all-of-the-node", "twice-the-node", "99.9-percent"])
def test_burstable_oom_score_stays_above_guaranteed(memory_request):
    """The floor is 1000 + guaranteedOOMScoreAdj = 3 (guaranteedOOMScoreAdj is -997)."""
    pod = make_pod(resources(requests={"memory": str(memory_request)}))
    assert oom_score_adj(pod, pod.containers[0], NODE_MEMORY) == 3


def test_each_burstable_container_is_scored_by_its_own_request():
    pod = make_pod(resources(requests={"memory": str(NODE_MEMORY // 2)}), resources(requests={"cpu": "1"}))
    assert [oom_score_adj(pod, c, NODE_MEMORY) for c in pod.containers] == [500, 999]


def test_node_critical_static_pod_is_protected_like_guaranteed():
    """kubeadm's control-plane manifests: static, system-node-critical, Burstable (cpu request only)."""
    pod = make_pod(resources(requests={"cpu": "250m"}), annotations={CONFIG_SOURCE_ANNOTATION: "file"},
                   spec={"priorityClassName": "system-node-critical", "priority": 2000001000})
    assert oom_score_adj(pod, pod.containers[0], NODE_MEMORY) == -997


def test_a_null_amount_is_a_zero_quantity_everywhere():
    # The API decodes `memory: null` as a zero quantity: no limit, no request, no crash later.
    pod = make_pod(resources(limits={"memory": None, "cpu": "1"}), resources(requests={"cpu": None}))
    assert qos_class(pod) == BURSTABLE
    assert linux_resources(pod, pod.containers[0], NODE_MEMORY).memory_limit_in_bytes == 0


@pytest.mark.parametrize("kind", ["requests", "limits"])
def test_a_bad_amount_is_refused_naming_its_field_in_requests_and_limits(kind):
    given = {"requests": {"memory": "64Mi"}, "limits": {"memory": "64Mi"}}
    given[kind]["memory"] = "lots"
    with pytest.raises(ValueError, match=rf"containers\[0\]\.resources\.{kind}\.memory.*'lots'.*must be a quantity"):
        make_pod(resources(**given))


def test_a_null_volume_is_refused_for_its_missing_name():
    with pytest.raises(ValueError, match=r"spec\.volumes\[0\]\.name.*Required value"):
        make_pod(resources(), spec={"volumes": [None]})
