"""The eviction manager's decisions and its one pass, with the kubelet's rules and words:
thresholds met with grace periods and minimum reclaim, conditions kept for the transition
period, pods ranked for memory and disk, critical pods spared, the Evicted message, and
admission under pressure."""

from __future__ import annotations

import asyncio

import pytest

from pykubelet.api.eviction import Amount, Threshold, eviction_thresholds, parse_thresholds
from pykubelet.api.pod import parse_pod
from pykubelet.node import eviction_policy as policy
from pykubelet.node.eviction import EvictionManager, PodPathCalls
from pykubelet.node.eviction_signals import ContainerUsage, Observation, PodUsage, observe, pod_usage
from pykubelet.pods.admission import pressure_rejection

MI = 2**20
MEMORY = Threshold("memory.available", quantity=100 * MI)


def pod(name, requests=None, limits=None, priority=None, annotations=None, tolerations=None, volumes=None):
    resources = {k: v for k, v in (("requests", requests), ("limits", limits)) if v}
    spec = {"containers": [{"name": "c", "image": "busybox", "resources": resources}]}
    if priority is not None:
        spec["priority"] = priority
    if tolerations:
        spec["tolerations"] = tolerations
    if volumes:
        spec["volumes"] = volumes
    return parse_pod({"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}",
                                   "annotations": annotations or {}}, "spec": spec}, "test")


def usage(memory=0, disk=0, name="c"):
    return PodUsage(memory, (ContainerUsage(name, memory, disk, 0),))


def test_summary_gives_the_kubelets_signals():
    summary = {"node": {"memory": {"availableBytes": 90 * MI, "workingSetBytes": 910 * MI},
                        "fs": {"availableBytes": 5, "capacityBytes": 100, "inodesFree": 7, "inodes": 70},
                        "runtime": {"imageFs": {"availableBytes": 9, "capacityBytes": 90}},
                        "rlimit": {"maxpid": 100, "curproc": 40}},
               "pods": [{"podRef": {"uid": "u"}, "memory": {"workingSetBytes": 5},
                         "containers": [{"name": "c", "memory": {"workingSetBytes": 4},
                                         "rootfs": {"usedBytes": 1}, "logs": {"usedBytes": 2}}]}]}
    assert observe(summary) == {"memory.available": Observation(90 * MI, 1000 * MI),
                                "nodefs.available": Observation(5, 100), "nodefs.inodesFree": Observation(7, 70),
                                "imagefs.available": Observation(9, 90), "pid.available": Observation(60, 100)}
    assert pod_usage(summary)["u"].memory == 5
    assert pod_usage(summary)["u"].containers[0].disk == 3


def test_hard_threshold_acts_at_once_and_reports_the_condition():
    decision = policy.decide([MEMORY], {"memory.available": Observation(90 * MI, 1000 * MI)},
                             policy.EvictionState(), now=100.0, transition_period=300)
    assert decision.conditions == ("MemoryPressure",)
    assert decision.actionable == (MEMORY,)


def test_soft_threshold_waits_for_its_grace_period():
    soft = Threshold("memory.available", quantity=100 * MI, grace_period=60)
    low = {"memory.available": Observation(90 * MI, 1000 * MI)}
    first = policy.decide([soft], low, policy.EvictionState(), now=0.0, transition_period=300)
    assert first.conditions == ("MemoryPressure",) and first.actionable == ()
    later = policy.decide([soft], low, first.state, now=61.0, transition_period=300)
    assert later.actionable == (soft,)


def test_condition_stays_for_the_transition_period_after_the_signal_recovers():
    low, fine = Observation(90 * MI, 1000 * MI), Observation(900 * MI, 1000 * MI)
    state = policy.decide([MEMORY], {"memory.available": low}, policy.EvictionState(), 0.0, 300).state
    kept = policy.decide([MEMORY], {"memory.available": fine}, state, 299.0, 300)
    assert kept.conditions == ("MemoryPressure",) and kept.actionable == ()
    assert policy.decide([MEMORY], {"memory.available": fine}, kept.state, 301.0, 300).conditions == ()


def test_minimum_reclaim_keeps_a_met_threshold_until_that_much_more_is_back():
    threshold = Threshold("memory.available", quantity=100 * MI, min_reclaim=Amount(quantity=50 * MI))
    state = policy.decide([threshold], {"memory.available": Observation(90 * MI, 1000 * MI)},
                          policy.EvictionState(), 0.0, 0).state
    still = policy.decide([threshold], {"memory.available": Observation(120 * MI, 1000 * MI)}, state, 10.0, 0)
    assert still.actionable == (threshold,)
    done = policy.decide([threshold], {"memory.available": Observation(151 * MI, 1000 * MI)}, still.state, 20.0, 0)
    assert done.actionable == ()


def test_soft_threshold_without_grace_period_is_refused():
    with pytest.raises(ValueError, match="grace period must be specified for the soft eviction threshold"):
        eviction_thresholds({}, parse_thresholds({"memory.available": "1Gi"}), {}, {})


def test_memory_ranking_usage_over_requests_then_priority_then_usage():
    best_effort = pod("be")
    guaranteed = pod("g", requests={"memory": "512Mi", "cpu": "1"}, limits={"memory": "512Mi", "cpu": "1"})
    low_priority = pod("low", priority=-10)
    ranked = policy.rank([guaranteed, best_effort, low_priority],
                         {"uid-be": usage(200 * MI), "uid-g": usage(400 * MI), "uid-low": usage(10 * MI)}, "memory")
    assert [p.name for p in ranked] == ["low", "be", "g"]


def test_disk_ranking_uses_ephemeral_storage_requests():
    small = pod("small", requests={"ephemeral-storage": "1Gi"})
    hog = pod("hog")
    ranked = policy.rank([small, hog], {"uid-small": usage(disk=100 * MI), "uid-hog": usage(disk=50 * MI)},
                         "ephemeral-storage")
    assert [p.name for p in ranked] == ["hog", "small"]


def test_eviction_message_in_the_kubelets_words():
    message = policy.eviction_message("memory", pod("be"), usage(500 * MI), [MEMORY],
                                      {"memory.available": Observation(90 * MI, 1000 * MI)})
    assert message == ("The node was low on resource: memory. Threshold quantity: 100Mi, available: 90Mi. "
                       "Container c was using 500Mi, request is 0, has larger consumption of memory. ")


def test_hard_eviction_kills_at_once_soft_within_max_pod_grace_period():
    assert policy.grace_override(MEMORY, pod("be"), 30) == 1
    soft = Threshold("memory.available", quantity=1, grace_period=10)
    assert policy.grace_override(soft, pod("be"), 20) == 20  # the pod's own is 30
    assert policy.grace_override(soft, pod("be"), 60) == 30


@pytest.mark.parametrize("conditions, name, kwargs, rejected", [
    (("MemoryPressure",), "be", {}, True),
    (("MemoryPressure",), "burstable", {"requests": {"memory": "1Mi"}}, False),
    (("MemoryPressure",), "tolerant", {"tolerations": [{"key": "node.kubernetes.io/memory-pressure",
                                                         "operator": "Exists", "effect": "NoSchedule"}]}, False),
    (("DiskPressure",), "burstable", {"requests": {"memory": "1Mi"}}, True),
    (("DiskPressure",), "critical", {"priority": 2000000000}, False),
    ((), "be", {}, False),
])
def test_admission_under_pressure(conditions, name, kwargs, rejected):
    rejection = pressure_rejection(pod(name, **kwargs), conditions)
    assert (rejection is not None) is rejected
    if rejection:
        assert rejection.reason == "Evicted"
        assert rejection.message == f"The node had condition: [{' '.join(conditions)}]. "


class Recorder:
    def __init__(self):
        self.events = []

    def record(self, ref, kind, reason, message):
        self.events.append((ref["name"], kind, reason, message))


def _summary(available, pods):
    return {"node": {"memory": {"availableBytes": available, "workingSetBytes": 1000 * MI - available}},
            "pods": [{"podRef": {"uid": uid}, "memory": {"workingSetBytes": used},
                      "containers": [{"name": "c", "memory": {"workingSetBytes": used}}]} for uid, used in pods]}


def test_one_pass_evicts_one_pod_the_best_effort_one_never_a_critical_one():
    static = pod("static", annotations={"kubernetes.io/config.source": "file"})
    best_effort = pod("be")
    guaranteed = pod("g", requests={"memory": "512Mi", "cpu": "1"}, limits={"memory": "512Mi", "cpu": "1"})
    evicted = []

    async def summary():
        return _summary(90 * MI, [("uid-static", 900 * MI), ("uid-be", 50 * MI), ("uid-g", 100 * MI)])

    recorder = Recorder()
    changes = []
    manager = EvictionManager([MEMORY], summary, PodPathCalls(
        lambda: [guaranteed, static, best_effort], lambda *order: evicted.append(order) or True, lambda uid: True),
        recorder, "node-1", on_change=lambda: changes.append(1), clock=lambda: 0.0)
    assert asyncio.run(manager.synchronize()) is best_effort
    assert manager.conditions == ("MemoryPressure",) and changes == [1]
    assert evicted == [("uid-be", "Evicted", "The node was low on resource: memory. Threshold quantity: 100Mi, "
                        "available: 90Mi. Container c was using 50Mi, request is 0, has larger consumption of memory. ",
                        1)]
    assert ("node-1", "Warning", "EvictionThresholdMet", "Attempting to reclaim memory") in recorder.events
    assert ("be", "Warning", "Evicted", evicted[0][2]) in recorder.events


def test_disk_pressure_reclaims_images_first_and_evicts_nobody_when_that_is_enough():
    disk = Threshold("nodefs.available", percent=10)
    free = [5]
    reclaimed = []

    async def summary():
        return {"node": {"fs": {"availableBytes": free[0], "capacityBytes": 100}}, "pods": []}

    async def reclaim():
        reclaimed.append(1)
        free[0] = 50

    manager = EvictionManager([disk], summary, PodPathCalls(lambda: [pod("be")], lambda *o: True, lambda u: True),
                              Recorder(), "node-1", reclaim_disk=reclaim, clock=lambda: 0.0)
    assert asyncio.run(manager.synchronize()) is None
    assert reclaimed == [1] and manager.conditions == ("DiskPressure",)


def test_images_on_their_own_filesystem_are_not_removed_for_the_root_dirs_disk():
    """With a dedicated image filesystem, removing images frees nothing on the root dir's: the
    kubelet reclaims nothing at node level for nodefs and goes on to evict a pod."""
    disk = Threshold("nodefs.available", percent=10)
    reclaimed, evicted = [], []

    async def summary():
        return {"node": {"fs": {"availableBytes": 5, "capacityBytes": 100}}, "pods": []}

    async def reclaim():
        reclaimed.append(1)

    manager = EvictionManager([disk], summary, PodPathCalls(lambda: [pod("be")], lambda *o: evicted.append(o) or True,
                                                            lambda u: True),
                              Recorder(), "node-1", reclaim_disk=reclaim, dedicated_image_fs=lambda: True,
                              clock=lambda: 0.0)
    assert asyncio.run(manager.synchronize()) is not None
    assert reclaimed == [] and [o[0] for o in evicted] == ["uid-be"]
    assert policy.reclaims_images("imagefs.available", dedicated_image_fs=True)
    assert policy.reclaims_images("nodefs.available", dedicated_image_fs=False)
