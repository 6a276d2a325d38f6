"""The conditions the kubelet owns (reasons and messages as its own), readiness gates, and the
pod's conditions that are not ours kept in every status."""

from __future__ import annotations

from pykubelet.api.pod import parse_pod
from pykubelet.pods.podstatus import pod_status
from pykubelet.runtime.state import EXITED, RUNNING, ContainerState, PodRuntimeState, SandboxState


def pod(status: dict | None = None, **spec):
    body = {"containers": [{"name": "run1", "image": "busybox:1.36"}], **spec}
    return parse_pod({"metadata": {"name": "p", "uid": "u1"}, "spec": body, "status": status or {}}, where="test")


def instance(name: str, state: str, exit_code: int = 0) -> ContainerState:
    return ContainerState(id=f"{name}-id", name=name, state=state, restart_count=0, hash="h", created_at=1000.0,
                          started_at=1001.0, finished_at=1002.0 if state == EXITED else 0.0, exit_code=exit_code,
                          sandbox_id="sb1")


def runtime(*containers: ContainerState) -> PodRuntimeState:
    return PodRuntimeState(uid="u1", sandboxes=[SandboxState(id="sb1", attempt=0, ready=True, created_at=900.0,
                                                             ip="10.88.0.7")], containers=list(containers))


def conditions(p, state) -> dict[str, dict]:
    return {c["type"]: c for c in pod_status(p, state, {}, "192.168.1.10", 900.0).to_dict()["conditions"]}


def test_a_failed_init_container_is_named_in_initialized_and_the_app_in_ready():
    p = pod(restartPolicy="Never", initContainers=[{"name": "init1", "image": "busybox:1.36"},
                                                   {"name": "init2", "image": "busybox:1.36"}])
    got = conditions(p, runtime(instance("init1", EXITED), instance("init2", EXITED, 1)))
    assert got["Initialized"]["reason"] == "ContainersNotInitialized"
    assert got["Initialized"]["message"] == "containers with incomplete status: [init2]"
    assert got["Ready"]["status"] == "False" and got["Ready"]["reason"] == "PodFailed"  # the pod Failed
    running = conditions(p, runtime(instance("init1", EXITED)))
    assert running["Ready"]["message"] == "containers with unready status: [run1]"
    assert running["Initialized"]["message"] == "containers with incomplete status: [init2]"


def test_readiness_gates_keep_a_ready_pod_not_ready_until_their_conditions_are_true():
    gates = [{"conditionType": "k8s.io/test-condition1"}, {"conditionType": "k8s.io/test-condition2"}]
    one = {"type": "k8s.io/test-condition1", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    two = {"type": "k8s.io/test-condition2", "status": "False"}
    got = conditions(pod({"conditions": [one]}, readinessGates=gates), runtime(instance("run1", RUNNING)))
    assert got["ContainersReady"]["status"] == "True"
    assert got["Ready"]["status"] == "False" and got["Ready"]["reason"] == "ReadinessGatesNotReady"
    assert got["Ready"]["message"] == 'corresponding condition of pod readiness gate "k8s.io/test-condition2" ' \
                                      'does not exist.'
    assert got["k8s.io/test-condition1"] == one  # not ours: carried as it is
    got = conditions(pod({"conditions": [one, two]}, readinessGates=gates), runtime(instance("run1", RUNNING)))
    assert got["Ready"]["message"] == 'the status of pod readiness gate "k8s.io/test-condition2" is not "True", ' \
                                      'but False'
    got = conditions(pod({"conditions": [one, {**two, "status": "True"}]}, readinessGates=gates),
                     runtime(instance("run1", RUNNING)))
    assert got["Ready"]["status"] == "True" and "reason" not in got["Ready"]


def test_a_succeeded_pod_is_not_ready_with_pod_completed():
    got = conditions(pod(restartPolicy="Never"), runtime(instance("run1", EXITED)))
    assert (got["Ready"]["status"], got["Ready"]["reason"]) == ("False", "PodCompleted")
    assert got["Initialized"]["status"] == "True"


def test_a_running_init_container_is_not_ready_and_keeps_the_pod_uninitialized():
    p = pod(initContainers=[{"name": "init1", "image": "busybox:1.36"}, {"name": "init2", "image": "busybox:1.36"}])
    status = pod_status(p, runtime(instance("init1", RUNNING)), {}, "192.168.1.10", 900.0).to_dict()
    assert [s["ready"] for s in status["initContainerStatuses"]] == [False, False]
    initialized = next(c for c in status["conditions"] if c["type"] == "Initialized")
    assert initialized["message"] == "containers with incomplete status: [init1 init2]"
