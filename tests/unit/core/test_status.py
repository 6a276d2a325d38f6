"""Pod status over time and across an agent restart, on the fake runtime: transition times are
the transition's, what a restarted agent reports is what the pod had, writes happen only on
change, and a burst of updates collapses into few syncs."""

from __future__ import annotations

import asyncio
import copy
from datetime import datetime

import pytest

from pykubelet.api.pod import Pod, parse_pod
from tests.fakes.kube import FakeKube
from tests.fakes.runtime import FakeRuntime
from tests.unit.core.harness import EPOCH, Core, clock, pod, until

pytestmark = pytest.mark.looptime

PATH = "/api/v1/namespaces/default/pods/web"
READY_PROBE = {"exec": {"command": ["check"]}, "periodSeconds": 1, "failureThreshold": 1}


def probed_pod():
    return pod(containers=[{"name": "app", "image": "busybox:1.36", "readinessProbe": READY_PROBE}])


async def test_ready_condition_is_stamped_with_the_time_it_turned_true(tmp_path):
    runtime = FakeRuntime(clock)
    runtime.exec_results["check"] = (1, b"not yet")
    node = Core(runtime, tmp_path).start()
    try:
        node.dispatcher.set_pods([probed_pod()])
        await until(lambda: node.status().get("phase") == "Running")
        started = node.status()["startTime"]
        await asyncio.sleep(100)
        assert node.condition("Ready")["status"] == "False"
        runtime.exec_results["check"] = (0, b"")
        flipped = await until(lambda: node.condition("Ready").get("status") == "True", what="Ready")
        ready = node.condition("Ready")["lastTransitionTime"]
        assert ready != started
        # The time it turned True: rfc3339 keeps whole seconds, and `until` saw it within a poll.
        assert 0 <= EPOCH + flipped - datetime.fromisoformat(ready).timestamp() < 2
        assert node.condition("PodScheduled")["lastTransitionTime"] == started  # unchanged since the start
        await asyncio.sleep(10)
        assert node.condition("Ready")["lastTransitionTime"] == ready  # kept while it stays True
    finally:
        await node.stop()


async def test_a_restarted_agent_reports_the_same_start_times_counts_and_transitions(tmp_path):
    runtime, kube = FakeRuntime(clock), FakeKube()
    runtime.behave("app", exit_code=1)
    scheduled = {"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                 "lastTransitionTime": "2023-11-14T22:10:00Z"}
    spec = parse_pod({**pod().raw, "status": {"phase": "Pending", "conditions": [scheduled]}}, "test")
    kube.objects[PATH] = copy.deepcopy(spec.raw)
    first = Core(runtime, tmp_path, kube).start()
    first.dispatcher.set_pods([spec])
    await until(lambda: len(runtime.started("app")) == 3, what="two restarts")
    runtime.behave("app")
    await until(lambda: first.status().get("phase") == "Running" and first.container().get("ready"), timeout=60)
    await asyncio.sleep(50)
    before = copy.deepcopy(first.status())
    await until(lambda: kube.objects[PATH].get("status") == before, what="the status written")
    starts = len(runtime.started("app"))
    assert before["containerStatuses"][0]["restartCount"] == starts - 1 >= 2
    await first.stop()
    await asyncio.sleep(300)  # the agent is down for five minutes

    # The new agent sees the pod as the apiserver lists it: with the status the old one wrote.
    listed = parse_pod(copy.deepcopy(kube.objects[PATH]), where="test")
    second = Core(runtime, tmp_path, kube).start()
    try:
        second.dispatcher.set_pods([listed])
        await until(lambda: second.status().get("phase") == "Running")
        after = second.status()
        assert after["startTime"] == before["startTime"]
        assert after["conditions"] == before["conditions"]
        assert scheduled in after["conditions"]  # the scheduler's time, kept by both agents
        assert second.container()["restartCount"] == before["containerStatuses"][0]["restartCount"]
        assert second.container()["state"] == before["containerStatuses"][0]["state"]  # same startedAt
        assert len(runtime.started("app")) == starts  # adopted, not restarted
    finally:
        await second.stop()


async def test_a_runtime_that_lost_the_containers_keeps_the_count_from_the_api_status_and_the_logs(tmp_path):
    runtime, kube = FakeRuntime(clock), FakeKube()
    runtime.behave("app", exit_code=1)
    spec = pod()
    kube.objects[PATH] = copy.deepcopy(spec.raw)
    first = Core(runtime, tmp_path, kube).start()
    first.dispatcher.set_pods([spec])
    await until(lambda: len(runtime.started("app")) == 3, what="two restarts")
    runtime.behave("app")
    await until(lambda: first.container().get("ready"), timeout=60)
    count = first.container()["restartCount"]
    await until(lambda: kube.objects[PATH].get("status", {}).get("containerStatuses", [{}])[0].get("ready"))
    await first.stop()
    for container_id in list(runtime.containers):  # containerd lost its containers meanwhile
        await runtime.remove_container(container_id)
    listed = parse_pod(copy.deepcopy(kube.objects[PATH]), where="test")
    seen = []
    second = Core(runtime, tmp_path, kube)
    set_status = second.statuses.set
    second.statuses.set = lambda pod_, status: (set_status(pod_, status), seen.append(second.container()))
    second.start()
    try:
        second.dispatcher.set_pods([listed])
        await until(lambda: second.container().get("ready"), what="the container again")
        assert second.container()["restartCount"] == count + 1  # one more start, counted on
        assert all(s["restartCount"] >= count for s in seen)  # never back to 0 meanwhile
        assert seen[0]["lastState"] == kube.objects[PATH]["status"]["containerStatuses"][0]["lastState"] or \
            seen[0]["restartCount"] == count
    finally:
        await second.stop()


async def test_a_restarted_standalone_agent_recovers_start_and_ready_times_from_the_runtime(tmp_path):
    runtime = FakeRuntime(clock)
    first = Core(runtime, tmp_path).start()
    first.dispatcher.set_pods([pod()])
    await until(lambda: first.condition("Ready").get("status") == "True")
    before = copy.deepcopy(first.status())
    await first.stop()
    await asyncio.sleep(300)
    second = Core(runtime, tmp_path).start()
    try:
        second.dispatcher.set_pods([pod()])
        await until(lambda: second.status().get("phase") == "Running")
        assert second.status()["startTime"] == before["startTime"]
        # The container's start, as the runtime tells it: the moment the first agent noticed, to the second.
        ready_then = datetime.fromisoformat(before["conditions"][2]["lastTransitionTime"])
        ready_now = datetime.fromisoformat(second.condition("Ready")["lastTransitionTime"])
        assert abs((ready_now - ready_then).total_seconds()) <= 1
        assert second.container()["state"] == before["containerStatuses"][0]["state"]
    finally:
        await second.stop()


class Mirrors:
    known = True

    def __init__(self, mirror=None):
        self.mirror = mirror

    def mirror_of(self, pod):
        return self.mirror

    async def ensure(self, pod):  # the mirror exists (kube.objects): nothing to create
        return False

    async def remove(self, pod):
        pass


async def test_a_static_pods_times_come_from_its_mirror_once_the_mirror_pods_are_known(tmp_path):
    runtime, kube = FakeRuntime(clock), FakeKube()
    static = pod(uid="uid-static")
    static = parse_pod({**static.raw, "metadata": {**static.raw["metadata"],
                                                   "annotations": {"kubernetes.io/config.source": "file"}}}, "test")
    kube.objects[PATH] = {"metadata": {"name": "web", "uid": "mirror-uid"}}
    first = Core(runtime, tmp_path, kube, Mirrors()).start()
    first.dispatcher.set_pods([static])
    await until(lambda: first.status("uid-static").get("phase") == "Running")
    mirror_status = copy.deepcopy(first.status("uid-static"))
    await until(lambda: kube.objects[PATH].get("status") == mirror_status, what="the mirror's status written")
    await first.stop()
    kube.writes.clear()
    await asyncio.sleep(300)

    mirrors = Mirrors(parse_pod({**copy.deepcopy(static.raw), "status": mirror_status}, "mirror"))
    mirrors.known = False  # the apiserver's pods are not listed yet when the static pod first syncs
    second = Core(runtime, tmp_path, kube, mirrors).start()
    try:
        second.dispatcher.set_pods([static])
        await until(lambda: second.status("uid-static").get("phase") == "Running")
        await asyncio.sleep(5)
        assert kube.patches() == []  # nothing is written to the mirror before it is known
        mirrors.known = True
        second.wakeups.wake("uid-static")
        await until(lambda: len(kube.patches()) == 1, what="the status written")
        written = kube.patches()[-1]["status"]
        assert written["startTime"] == mirror_status["startTime"]
        assert written["conditions"] == mirror_status["conditions"]
    finally:
        await second.stop()


async def test_status_is_written_only_when_it_changed(tmp_path):
    runtime, kube = FakeRuntime(clock), FakeKube()
    spec = pod()
    kube.objects[PATH] = copy.deepcopy(spec.raw)
    node = Core(runtime, tmp_path, kube).start()
    try:
        node.dispatcher.set_pods([spec])
        await until(lambda: kube.objects[PATH].get("status", {}).get("phase") == "Running")
        written = len(kube.patches())
        for _ in range(5):  # resyncs and wake-ups that change nothing
            node.wakeups.wake("uid-web")
            await asyncio.sleep(70)
        assert len(kube.patches()) == written
        runtime.exit("app", 1)
        await until(lambda: kube.objects[PATH]["status"]["containerStatuses"][0]["restartCount"] == 1)
        assert len(kube.patches()) > written
        assert all(p["metadata"]["uid"] == "uid-web" for p in kube.patches())  # the UID precondition
    finally:
        await node.stop()


async def test_a_burst_of_updates_collapses_into_a_few_syncs_of_the_latest_spec(tmp_path):
    runtime = FakeRuntime(clock)
    node = Core(runtime, tmp_path).start()
    try:
        node.dispatcher.set_pods([pod()])
        await until(lambda: node.status().get("phase") == "Running")
        worker = node.dispatcher.workers["uid-web"]
        syncs = worker.syncs
        for i in range(100):
            labelled = pod()
            labelled = parse_pod({**labelled.raw, "metadata": {**labelled.raw["metadata"], "labels": {"n": str(i)}}},
                                 "test")
            node.dispatcher.set_pods([labelled])
        await asyncio.sleep(1)
        assert worker.syncs - syncs <= 2
        assert worker.pod.labels == {"n": "99"}
        assert len(runtime.started("app")) == 1  # a label change restarts nothing
    finally:
        await node.stop()


async def test_a_ready_condition_another_writer_overwrote_is_written_again(tmp_path):
    """The node lifecycle controller sets every pod's Ready to False while the node is not Ready
    (on a new kubeadm control plane, until its podCIDR arrives); the node's own view comes back."""
    runtime, kube = FakeRuntime(clock), FakeKube()
    spec = pod()
    kube.objects[PATH] = copy.deepcopy(spec.raw)
    node = Core(runtime, tmp_path, kube).start()

    def ready_in_api() -> str:
        conditions = kube.objects[PATH].get("status", {}).get("conditions") or []
        return next((c["status"] for c in conditions if c["type"] == "Ready"), "")
    try:
        node.dispatcher.set_pods([spec], "api")
        await until(lambda: ready_in_api() == "True", what="Ready written")
        for condition in kube.objects[PATH]["status"]["conditions"]:
            if condition["type"] == "Ready":
                condition.update(status="False", reason="NodeNotReady")  # the controller's write...
        node.dispatcher.set_pods([parse_pod(copy.deepcopy(kube.objects[PATH]), "api")], "api")  # ...watched
        overwritten_at = asyncio.get_running_loop().time()
        restored_at = await until(lambda: ready_in_api() == "True", what="Ready written again")
        assert restored_at - overwritten_at <= 11  # within one status resync period
    finally:
        await node.stop()


def generation(number: int, **spec) -> Pod:
    """The pod as the apiserver sends it after `number` spec changes."""
    raw = pod(**spec).raw
    raw["metadata"]["generation"] = number
    return parse_pod(raw, "test")


KUBELETS_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")


async def test_the_status_and_each_condition_name_the_generation_of_the_spec_they_were_made_for(tmp_path):
    """The kubelet's observedGeneration: what `kubectl wait` and controllers read to know the node
    has acted on a spec change (tolerations, activeDeadlineSeconds); a change that restarts or
    flips nothing still moves it, and leaves each condition's transition time as it was."""
    runtime, kube = FakeRuntime(clock), FakeKube()
    kube.objects[PATH] = copy.deepcopy(generation(1).raw)
    node = Core(runtime, tmp_path, kube).start()
    try:
        node.dispatcher.set_pods([generation(1)])
        await until(lambda: kube.objects[PATH].get("status", {}).get("phase") == "Running")
        written = kube.objects[PATH]["status"]
        assert written["observedGeneration"] == 1
        assert {c["type"]: c.get("observedGeneration") for c in written["conditions"]} == \
            dict.fromkeys(KUBELETS_CONDITIONS, 1)
        before = {c["type"]: c["lastTransitionTime"] for c in written["conditions"]}
        # loop time (looptime), not a wait for anything: the next sync's clock reads 5 s later, so a
        # condition stamped again would show it
        await asyncio.sleep(5)
        node.dispatcher.set_pods([generation(2, activeDeadlineSeconds=5000)])
        await until(lambda: kube.objects[PATH]["status"].get("observedGeneration") == 2, what="generation 2 observed")
        written = kube.objects[PATH]["status"]
        assert {c["type"]: c.get("observedGeneration") for c in written["conditions"]} == \
            dict.fromkeys(KUBELETS_CONDITIONS, 2)
        assert {c["type"]: c["lastTransitionTime"] for c in written["conditions"]} == before
        assert len(runtime.started("app")) == 1
    finally:
        await node.stop()


async def test_a_pod_the_apiserver_never_numbered_reports_no_generation(tmp_path):
    node = Core(FakeRuntime(clock), tmp_path).start()
    try:
        node.dispatcher.set_pods([pod()])  # a static pod's manifest has no metadata.generation
        await until(lambda: node.status().get("phase") == "Running")
        assert "observedGeneration" not in node.status()
        assert not [c for c in node.status()["conditions"] if "observedGeneration" in c]
    finally:
        await node.stop()
