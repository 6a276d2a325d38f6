"""The status manager's side of pod status: a typed status leaves as the v1 JSON, keeps what the
apiserver's status (a dict) says of the pod's past, and is rendered in one PodList."""

from __future__ import annotations

import copy

from pykubelet.api.pod import parse_pod
from pykubelet.api.pod_status import PodStatus
from pykubelet.pods.podstatus import pod_status
from pykubelet.runtime.state import PodRuntimeState
from pykubelet.status.manager import StatusManager

HOST_IP = "192.168.1.10"
EARLIER = "2026-01-01T00:00:00Z"
EXITED = {"exitCode": 1, "reason": "Error", "startedAt": EARLIER, "finishedAt": EARLIER,
          "containerID": "containerd://old1"}


def listed_pod(app_state: dict) -> dict:
    """The pod as the apiserver lists it after the agent that ran it stopped."""
    app = {"name": "app", "image": "busybox:1.36", "imageID": "sha256:abc", "ready": False, "started": False,
           "restartCount": 4, "lastState": {"terminated": EXITED}, "state": app_state,
           "containerID": "containerd://old2"}
    return {"metadata": {"name": "web", "namespace": "shop", "uid": "u1"},
            "spec": {"containers": [{"name": "app", "image": "busybox:1.36"}]},
            "status": {"phase": "Running", "startTime": EARLIER, "containerStatuses": [app],
                       "conditions": [{"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                                       "lastTransitionTime": EARLIER},
                                      {"type": "Ready", "status": "True", "lastProbeTime": None,
                                       "lastTransitionTime": EARLIER},
                                      {"type": "example.com/gate", "status": "True"}]}}


def computed(raw: dict) -> tuple:
    """What this node computes for the pod while the runtime holds nothing of it."""
    pod = parse_pod(copy.deepcopy(raw), where="test")
    return pod, pod_status(pod, PodRuntimeState(uid="u1"), {}, HOST_IP, start_time=1_800_000_000.0, now=1_800_000_000.0)


def test_a_rejected_pods_status_has_the_shape_it_always_had():
    rejected = PodStatus(phase="Failed", reason="OutOfcpu", message="Pod was rejected: Node didn't have enough")
    assert rejected.to_dict() == {"phase": "Failed", "reason": "OutOfcpu",
                                  "message": "Pod was rejected: Node didn't have enough", "containerStatuses": []}


def test_what_the_apiserver_holds_of_the_past_is_kept():
    raw = listed_pod({"running": {"startedAt": EARLIER}})
    pod, status = computed(raw)
    statuses = StatusManager()
    statuses.set(pod, status)
    kept = statuses.get("u1")
    assert kept["startTime"] == EARLIER
    by_type = {c["type"]: c for c in kept["conditions"]}
    assert by_type["PodScheduled"]["lastTransitionTime"] == EARLIER  # unchanged: its time too
    assert by_type["Ready"]["status"] == "False" and by_type["Ready"]["lastTransitionTime"] != EARLIER
    assert by_type["example.com/gate"] == {"type": "example.com/gate", "status": "True"}  # as written
    (app,) = kept["containerStatuses"]
    assert app["restartCount"] == 4 and app["lastState"] == {"terminated": EXITED}
    assert app["state"] == {"waiting": {"reason": "ContainerCreating"}}


def test_a_terminated_container_the_runtime_lost_stays_terminated():
    raw = listed_pod({"terminated": {**EXITED, "containerID": "containerd://old2"}})
    pod, status = computed(raw)
    statuses = StatusManager()
    statuses.set(pod, status)
    assert statuses.get("u1")["containerStatuses"] == raw["status"]["containerStatuses"]


def test_a_terminated_ephemeral_container_the_runtime_lost_stays_terminated():
    """The apiserver refuses a terminated ephemeral container turned back to waiting (found by a
    restarted agent finishing a deleted pod that had run `kubectl debug`)."""
    raw = listed_pod({"running": {"startedAt": EARLIER}})
    raw["spec"]["ephemeralContainers"] = [{"name": "debugger", "image": "busybox:1.36"}]
    raw["status"]["ephemeralContainerStatuses"] = [{
        "name": "debugger", "image": "busybox:1.36", "imageID": "sha256:abc", "ready": False, "restartCount": 0,
        "containerID": "containerd://dbg", "lastState": {},
        "state": {"terminated": {**EXITED, "containerID": "containerd://dbg"}}}]
    pod, status = computed(raw)
    statuses = StatusManager()
    statuses.set(pod, status)
    assert statuses.get("u1")["ephemeralContainerStatuses"] == raw["status"]["ephemeralContainerStatuses"]


def test_the_pod_list_serves_each_pod_with_its_status_and_shares_nothing_with_the_pod():
    raw = listed_pod({"running": {"startedAt": EARLIER}})
    pod, status = computed(raw)
    statuses = StatusManager()
    statuses.set(pod, status)
    (item,) = statuses.pod_list()["items"]
    assert (item["apiVersion"], item["kind"], item["metadata"]["uid"]) == ("v1", "Pod", "u1")
    assert item["status"] == statuses.get("u1")
    for condition in item["status"]["conditions"]:
        condition["status"] = "Unknown"  # a reader that changes what it was served...
    assert pod.raw["status"]["conditions"][2]["status"] == "True"  # ...changes neither the pod
    assert statuses.get("u1")["conditions"][2]["status"] == "False"  # nor what the node reports


async def test_a_pod_is_reported_once_its_final_status_is_written_to_the_apiserver():
    """What a node shutting down waits for: a Failed (or Succeeded) status the apiserver has."""
    from pykubelet.kube.paths import pod_path
    from tests.fakes.kube import FakeKube

    kube = FakeKube()
    raw = listed_pod({"running": {"startedAt": "2026-01-01T00:00:00Z"}})
    kube.objects[pod_path("shop", "web")] = copy.deepcopy(raw)
    statuses = StatusManager(kube)
    pod = parse_pod(raw, where="t")
    statuses.set(pod, PodStatus(phase="Running"))
    await statuses._write_status(pod.uid)
    assert not statuses.reported(pod.uid)  # written, but not final
    statuses.set(pod, PodStatus(phase="Failed", reason="Terminated", message="node shutdown"))
    assert not statuses.reported(pod.uid)  # final, not written yet
    await statuses._write_status(pod.uid)
    assert statuses.reported(pod.uid) and kube.patches()[-1]["status"]["phase"] == "Failed"
    assert StatusManager().reported(pod.uid)  # no apiserver: nothing to wait for


async def test_a_status_set_while_the_previous_one_is_being_written_is_written_too():
    """The worker's Running can come while the apiserver is still taking its Pending: the write
    that ends must not take the newer status's turn (the pod would stay Pending in the API until
    its next sync, a minute later; a node shutting down would take its Failed as written)."""
    import asyncio

    from pykubelet.kube.paths import pod_path
    from tests.fakes.kube import FakeKube
    from tests.helpers import wait_for

    class SlowKube(FakeKube):
        def __init__(self):
            super().__init__()
            self.in_flight, self.go_on = asyncio.Event(), asyncio.Event()

        async def patch(self, path, body, *args, **kwargs):
            self.in_flight.set()
            await self.go_on.wait()
            return await super().patch(path, body, *args, **kwargs)

    kube = SlowKube()
    raw = listed_pod({"waiting": {"reason": "ContainerCreating"}})
    raw["status"]["phase"] = "Pending"
    kube.objects[pod_path("shop", "web")] = copy.deepcopy(raw)
    statuses = StatusManager(kube)
    pod = parse_pod(raw, where="t")
    writer = asyncio.create_task(statuses.run())
    try:
        statuses.set(pod, PodStatus(phase="Pending", reason="first"))
        await asyncio.wait_for(kube.in_flight.wait(), 5)
        statuses.set(pod, PodStatus(phase="Running"))  # while the first write is on its way
        kube.go_on.set()
        await wait_for(lambda: kube.objects[pod_path("shop", "web")]["status"]["phase"] == "Running", 5,
                       f"the newer status written: {[p['status']['phase'] for p in kube.patches()]}")

        # the same race at a shutdown: a Failed set while Running is on its way is not "reported"
        kube.in_flight.clear()
        kube.go_on.clear()
        statuses.set(pod, PodStatus(phase="Running", reason="again"))
        await asyncio.wait_for(kube.in_flight.wait(), 5)
        statuses.set(pod, PodStatus(phase="Failed", reason="Terminated"))
        kube.go_on.set()
        await wait_for(lambda: statuses.reported(pod.uid), 5, "the Failed status written")
        assert kube.objects[pod_path("shop", "web")]["status"]["phase"] == "Failed"
    finally:
        writer.cancel()
