"""The Pod status users see: phase, container states with lastState and restartCount, pod IP."""

from __future__ import annotations

import pytest

from pykubelet.api.pod import Pod, parse_pod
from pykubelet.api.pod_status import PodStatus
from pykubelet.pods.podstatus import pod_status
from pykubelet.probes.readiness import without_probe_results
from pykubelet.runtime.state import CREATED, EXITED, RUNNING, ContainerState, PodRuntimeState, SandboxState

HOST_IP = "192.168.1.10"
BACK_OFF = ("CrashLoopBackOff", "back-off 10s restarting failed container=app pod=p_default(uid1)")


def make_pod(restart_policy: str = "Always", host_network: bool = False, names: tuple[str, ...] = ("app",)) -> Pod:
    return parse_pod({"metadata": {"name": "p", "uid": "uid1"},
                      "spec": {"restartPolicy": restart_policy, "hostNetwork": host_network,
                               "containers": [{"name": n, "image": "busybox:1.36"} for n in names]}}, where="test")


def instance(state: str, restart_count: int = 0, exit_code: int = 0, reason: str = "", name: str = "app",
             sandbox_id: str = "sb1") -> ContainerState:
    return ContainerState(id=f"{name}{restart_count}", name=name, state=state, restart_count=restart_count,
                          hash="h", created_at=1000.0 + restart_count * 100, started_at=1001.0 + restart_count * 100,
                          finished_at=1050.0 + restart_count * 100 if state == EXITED else 0.0,
                          exit_code=exit_code, reason=reason, image_ref="sha256:abc", sandbox_id=sandbox_id)


def runtime(*containers: ContainerState, ready: bool = True, ip: str = "10.88.0.7") -> PodRuntimeState:
    sandbox = SandboxState(id="sb1", attempt=0, ready=ready, created_at=900.0, ip=ip if ready else "")
    return PodRuntimeState(uid="uid1", sandboxes=[sandbox],
                           containers=sorted(containers, key=lambda c: c.created_at, reverse=True))


def status(pod: Pod, state: PodRuntimeState, waiting: dict | None = None) -> dict:
    return pod_status(pod, state, waiting or {}, HOST_IP, start_time=900.0).to_dict()


def app(status_: dict) -> dict:
    (container,) = status_["containerStatuses"]
    return container


def test_pod_waiting_for_its_container_is_pending_with_container_creating():
    s = status(make_pod(), PodRuntimeState(uid="uid1"))
    assert s["phase"] == "Pending"
    assert app(s)["state"] == {"waiting": {"reason": "ContainerCreating"}}
    assert app(s)["ready"] is False


def test_image_pull_error_shows_as_the_waiting_reason_while_pending():
    s = status(make_pod(), runtime(), {"app": ("ErrImagePull", "pull access denied")})
    assert s["phase"] == "Pending"
    assert app(s)["state"] == {"waiting": {"reason": "ErrImagePull", "message": "pull access denied"}}


def test_running_container_makes_the_pod_running_and_ready():
    s = status(make_pod(), runtime(instance(RUNNING)))
    assert s["phase"] == "Running"
    assert "running" in app(s)["state"]
    assert app(s)["ready"] is True and app(s)["containerID"] == "containerd://app0"
    assert {c["type"]: c["status"] for c in s["conditions"]}["Ready"] == "True"


def test_never_pod_whose_container_exited_0_succeeded():
    s = status(make_pod("Never"), runtime(instance(EXITED, exit_code=0), ready=False))
    assert s["phase"] == "Succeeded"
    assert app(s)["state"]["terminated"]["reason"] == "Completed"


def test_never_pod_whose_container_exited_3_failed_with_the_exit_code():
    s = status(make_pod("Never"), runtime(instance(EXITED, exit_code=3), ready=False))
    assert s["phase"] == "Failed"
    terminated = app(s)["state"]["terminated"]
    assert terminated["exitCode"] == 3
    assert terminated["reason"] == "Error"


def test_runtime_reason_is_kept_over_the_generic_one():
    s = status(make_pod("Never"), runtime(instance(EXITED, exit_code=137, reason="OOMKilled"), ready=False))
    assert app(s)["state"]["terminated"]["reason"] == "OOMKilled"


@pytest.mark.parametrize("policy, exit_codes, phase", [
    ("OnFailure", [0], "Succeeded"),
    ("OnFailure", [1], "Running"),        # it will be restarted
    ("Never", [0, 0], "Succeeded"),
    ("Never", [0, 1], "Failed"),
])
def test_phase_once_every_container_exited(policy, exit_codes, phase):
    names = tuple(f"c{i}" for i in range(len(exit_codes)))
    pod = make_pod(policy, names=names)
    s = status(pod, runtime(*(instance(EXITED, exit_code=e, name=n) for n, e in zip(names, exit_codes)), ready=False))
    assert s["phase"] == phase


def test_crash_looping_container_is_waiting_in_a_running_pod_with_its_last_exit():
    s = status(make_pod("Always"), runtime(instance(EXITED, restart_count=2, exit_code=1)), {"app": BACK_OFF})
    assert s["phase"] == "Running"
    assert app(s)["state"] == {"waiting": {"reason": "CrashLoopBackOff", "message": BACK_OFF[1]}}
    last = app(s)["lastState"]["terminated"]
    assert last["exitCode"] == 1 and last["reason"] == "Error"
    assert last["containerID"] == "containerd://app2"
    assert app(s)["restartCount"] == 2
    assert app(s)["ready"] is False
    assert {c["type"]: c["status"] for c in s["conditions"]}["Ready"] == "False"


def test_restarted_container_shows_the_previous_exit_as_last_state():
    s = status(make_pod(), runtime(instance(EXITED, restart_count=0, exit_code=2), instance(RUNNING, restart_count=1)))
    assert "running" in app(s)["state"]
    assert app(s)["lastState"]["terminated"]["exitCode"] == 2


def test_restart_count_comes_from_the_latest_instance():
    s = status(make_pod(), runtime(instance(EXITED, 3, 1), instance(EXITED, 4, 1), instance(RUNNING, 5)))
    assert app(s)["restartCount"] == 5


def test_created_container_that_failed_to_start_shows_why():
    s = status(make_pod(), runtime(instance(CREATED)), {"app": ("RunContainerError", "exec: not found")})
    assert s["phase"] == "Pending"
    assert app(s)["state"]["waiting"]["reason"] == "RunContainerError"


def test_pod_ip_comes_from_the_ready_sandbox():
    s = status(make_pod(), runtime(instance(RUNNING), ip="10.88.0.7"))
    assert s["podIP"] == "10.88.0.7"
    assert s["podIPs"] == [{"ip": "10.88.0.7"}]
    assert s["hostIP"] == HOST_IP


def test_pod_without_a_ready_sandbox_has_no_pod_ip():
    s = status(make_pod("Never"), runtime(instance(EXITED), ready=False))
    assert "podIP" not in s


def test_host_network_pod_gets_the_host_ip():
    s = status(make_pod(host_network=True), runtime(instance(RUNNING), ip=""))
    assert s["podIP"] == HOST_IP


SIDECAR_POD = {"metadata": {"name": "p", "uid": "uid1"},
               "spec": {"initContainers": [{"name": "side", "image": "busybox:1.36", "restartPolicy": "Always"}],
                        "containers": [{"name": "app", "image": "busybox:1.36"}]}}


def test_readiness_is_asked_once_and_the_pod_follows_what_it_set():
    handed = []

    def app_not_ready(pod: Pod, status_: PodStatus) -> None:
        handed.append(status_)
        without_probe_results(pod, status_)
        status_.container_statuses[0].ready = False

    s = pod_status(make_pod(), runtime(instance(RUNNING)), {}, HOST_IP, 900.0, readiness=app_not_ready)
    assert handed == [s]
    d = s.to_dict()
    assert app(d)["ready"] is False and app(d)["started"] is True
    ready = {c["type"]: c for c in d["conditions"]}["Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "ContainersNotReady")
    assert ready["message"] == "containers with unready status: [app]"


def test_initialization_waits_for_a_sidecar_until_readiness_says_it_started():
    def sidecar_not_started(pod: Pod, status_: PodStatus) -> None:
        without_probe_results(pod, status_)
        status_.init_container_statuses[0].started = False

    pod = parse_pod(SIDECAR_POD, where="test")
    state = runtime(instance(RUNNING, name="side"))
    waiting = pod_status(pod, state, {}, HOST_IP, 900.0, readiness=sidecar_not_started).to_dict()
    assert waiting["phase"] == "Pending"
    assert app(waiting)["state"] == {"waiting": {"reason": "PodInitializing"}}
    initialized = {c["type"]: c for c in waiting["conditions"]}["Initialized"]
    assert (initialized["status"], initialized["message"]) == ("False", "containers with incomplete status: [side]")
    started = status(pod, state)
    assert app(started)["state"] == {"waiting": {"reason": "ContainerCreating"}}  # its turn now
    assert {c["type"]: c["status"] for c in started["conditions"]}["Initialized"] == "True"
