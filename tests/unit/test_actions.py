"""What one sync does to a pod (the kubelet's computePodActions) and when a pod is finished for good."""

from __future__ import annotations

import pytest

from pykubelet.api.pod import Pod, parse_pod
from pykubelet.pods.actions import compute_pod_actions, is_terminal
from pykubelet.runtime.specs import container_hash
from pykubelet.runtime.state import CREATED, EXITED, RUNNING, UNKNOWN, ContainerState, PodRuntimeState, SandboxState


def make_pod(*names: str, restart_policy: str = "Always") -> Pod:
    return parse_pod({"metadata": {"name": "p", "uid": "uid1"},
                      "spec": {"restartPolicy": restart_policy,
                               "containers": [{"name": n, "image": "busybox:1.36", "command": ["sh"]}
                                              for n in names]}}, where="test")


def sandbox(id: str = "sb1", attempt: int = 0, ready: bool = True, created_at: float = 100.0) -> SandboxState:
    return SandboxState(id=id, attempt=attempt, ready=ready, created_at=created_at, ip="10.88.0.5" if ready else "")


def container(pod: Pod, name: str, state: str, exit_code: int = 0, sandbox_id: str = "sb1", id: str = "",
              hash: str | None = None, restart_count: int = 0) -> ContainerState:
    spec = next((c for c in pod.containers if c.name == name), None)
    return ContainerState(id=id or f"{name}-{restart_count}", name=name, state=state, restart_count=restart_count,
                          hash=hash if hash is not None else (container_hash(spec) if spec else "deadbeef"),
                          created_at=200.0 + restart_count, exit_code=exit_code, sandbox_id=sandbox_id)


def state(sandboxes=(), containers=()) -> PodRuntimeState:
    return PodRuntimeState(uid="uid1", sandboxes=list(sandboxes), containers=list(containers))


def test_no_sandbox_creates_one_at_attempt_0_and_starts_every_container_in_spec_order():
    pod = make_pod("b", "a")
    actions = compute_pod_actions(pod, state())
    assert actions.create_sandbox and actions.attempt == 0
    assert actions.start == ["b", "a"]
    assert not actions.kill_pod and not actions.kill


def test_dead_sandbox_is_replaced_by_the_next_attempt_after_killing_the_pod():
    pod = make_pod("app")
    dead = sandbox(attempt=2, ready=False)
    actions = compute_pod_actions(pod, state([dead], [container(pod, "app", RUNNING)]))
    assert actions.kill_pod
    assert actions.create_sandbox and actions.attempt == 3
    assert actions.start == ["app"]


def test_dead_sandbox_with_exited_containers_gets_a_new_sandbox_under_always():
    pod = make_pod("app")
    actions = compute_pod_actions(pod, state([sandbox(attempt=0, ready=False)], [container(pod, "app", EXITED, 137)]))
    assert actions.create_sandbox and actions.attempt == 1
    assert actions.start == ["app"]


def test_never_pod_with_dead_sandbox_and_exited_containers_gets_no_new_sandbox():
    pod = make_pod("app", restart_policy="Never")
    actions = compute_pod_actions(pod, state([sandbox(ready=False)], [container(pod, "app", EXITED, 1)]))
    assert not actions.create_sandbox
    assert actions.start == []


def test_never_pod_whose_dead_sandbox_never_got_containers_tries_a_new_sandbox():
    pod = make_pod("app", restart_policy="Never")
    actions = compute_pod_actions(pod, state([sandbox(attempt=0, ready=False)]))
    assert actions.create_sandbox and actions.attempt == 1


def test_on_failure_pod_with_dead_sandbox_restarts_only_failed_containers():
    pod = make_pod("ok", "bad", restart_policy="OnFailure")
    actions = compute_pod_actions(pod, state([sandbox(ready=False)], [
        container(pod, "ok", EXITED, 0), container(pod, "bad", EXITED, 1)]))
    assert actions.create_sandbox
    assert actions.start == ["bad"]


def test_on_failure_pod_with_dead_sandbox_and_all_succeeded_gets_no_new_sandbox():
    pod = make_pod("ok", restart_policy="OnFailure")
    actions = compute_pod_actions(pod, state([sandbox(ready=False)], [container(pod, "ok", EXITED, 0)]))
    assert not actions.create_sandbox and actions.start == []


@pytest.mark.parametrize("policy, exit_code, restarted", [
    ("Always", 0, True),
    ("Always", 1, True),
    ("OnFailure", 0, False),
    ("OnFailure", 1, True),
    ("OnFailure", 137, True),
    ("Never", 0, False),
    ("Never", 1, False),
])
def test_exited_container_in_ready_sandbox_is_restarted_per_restart_policy(policy, exit_code, restarted):
    pod = make_pod("app", restart_policy=policy)
    actions = compute_pod_actions(pod, state([sandbox()], [container(pod, "app", EXITED, exit_code)]))
    assert not actions.create_sandbox and not actions.kill_pod
    assert actions.start == (["app"] if restarted else [])
    if restarted:
        assert actions.sandbox_id == "sb1"


def test_running_pod_with_unchanged_spec_needs_nothing():
    pod = make_pod("app")
    assert compute_pod_actions(pod, state([sandbox()], [container(pod, "app", RUNNING)])).is_noop()


def test_running_container_with_a_changed_spec_is_killed_and_started_again():
    pod = make_pod("app")
    running = container(pod, "app", RUNNING, hash="0ld0ld00")
    actions = compute_pod_actions(pod, state([sandbox()], [running]))
    assert running.id in actions.kill
    assert actions.start == ["app"]


def test_running_container_not_in_the_spec_is_killed():
    pod = make_pod("app")
    stray = container(pod, "gone", RUNNING, id="stray")
    actions = compute_pod_actions(pod, state([sandbox()], [container(pod, "app", RUNNING), stray]))
    assert list(actions.kill) == ["stray"]
    assert actions.start == []


def test_container_running_in_an_old_sandbox_is_replaced_in_the_current_one():
    pod = make_pod("app")
    old = container(pod, "app", RUNNING, sandbox_id="sb0")
    actions = compute_pod_actions(pod, state([sandbox("sb1"), sandbox("sb0", ready=False, created_at=50.0)], [old]))
    assert old.id in actions.kill
    assert actions.start == ["app"]


@pytest.mark.parametrize("policy", ["Always", "OnFailure", "Never"])
def test_created_but_never_started_container_is_started_again(policy):
    pod = make_pod("app", restart_policy=policy)
    actions = compute_pod_actions(pod, state([sandbox()], [container(pod, "app", CREATED)]))
    assert actions.start == ["app"]


def test_two_ready_sandboxes_are_reconciled_into_a_new_one():
    # e.g. RunPodSandbox timed out on our side but completed in the runtime, and was retried.
    # The kubelet kills the pod and creates one fresh sandbox; otherwise the older one stays
    # ready for ever, holding its IP and pause process.
    pod = make_pod("app")
    newer, older = sandbox("sb2", attempt=1, created_at=200.0), sandbox("sb1", attempt=0, created_at=100.0)
    actions = compute_pod_actions(pod, state([newer, older], [container(pod, "app", RUNNING, sandbox_id="sb2")]))
    assert actions.kill_pod
    assert actions.create_sandbox and actions.attempt == 2


@pytest.mark.parametrize("policy, states, terminal", [
    ("Never", [(EXITED, 0)], True),
    ("Never", [(EXITED, 1)], True),
    ("Never", [(EXITED, 0), (RUNNING, 0)], False),
    ("Never", [(EXITED, 0), None], False),         # the second container has not run yet
    ("Never", [(CREATED, 0)], False),
    ("Never", [(UNKNOWN, 0)], False),
    ("OnFailure", [(EXITED, 0)], True),
    ("OnFailure", [(EXITED, 0), (EXITED, 2)], False),
    ("Always", [(EXITED, 0)], False),
    ("Always", [(EXITED, 1)], False),
])
def test_pod_is_terminal_once_no_container_will_run_again(policy, states, terminal):
    names = [f"c{i}" for i in range(len(states))]
    pod = make_pod(*names, restart_policy=policy)
    runtime = [container(pod, n, s[0], s[1]) for n, s in zip(names, states) if s is not None]
    assert is_terminal(pod, state([sandbox(ready=False)], runtime)) is terminal


def with_ephemeral(pod: Pod) -> Pod:
    raw = {**pod.raw, "spec": {**pod.raw["spec"], "ephemeralContainers": [
        {"name": "debugger", "image": "busybox:1.36", "command": ["sh"], "stdin": True, "tty": True}]}}
    return parse_pod(raw, where="test")


def test_an_ephemeral_container_starts_once_in_the_running_pod_and_never_again():
    pod = with_ephemeral(make_pod("app"))
    running = [container(pod, "app", RUNNING)]
    assert compute_pod_actions(pod, state([sandbox()], running)).start == ["debugger"]
    for debugger_state, code in ((RUNNING, 0), (EXITED, 0), (EXITED, 1)):
        actions = compute_pod_actions(pod, state([sandbox()], [*running, container(pod, "debugger", debugger_state,
                                                                                   code)]))
        assert actions.is_noop()  # neither restarted nor killed as "not in the pod spec"
    # A pod whose sandbox is replaced starts its regular containers, not its ephemeral ones.
    assert compute_pod_actions(pod, state([sandbox(ready=False)])).start == ["app"]


def test_the_app_waits_for_a_sidecar_until_its_startup_probe_succeeded():
    pod = parse_pod({"metadata": {"name": "p", "uid": "uid1"}, "spec": {
        "initContainers": [{"name": "proxy", "image": "busybox:1.36", "restartPolicy": "Always",
                            "startupProbe": {"exec": {"command": ["ready"]}}}],
        "containers": [{"name": "app", "image": "busybox:1.36"}]}}, where="test")
    proxy = container(pod, "proxy", RUNNING, hash=container_hash(pod.init_containers[0]))
    assert compute_pod_actions(pod, state([sandbox()], [proxy]), unstarted={proxy.id}).start == []
    assert compute_pod_actions(pod, state([sandbox()], [proxy])).start == ["app"]


def test_a_sidecar_whose_startup_probe_gave_up_is_restarted_before_the_app_starts():
    pod = parse_pod({"metadata": {"name": "p", "uid": "uid1"}, "spec": {
        "initContainers": [{"name": "proxy", "image": "busybox:1.36", "restartPolicy": "Always",
                            "startupProbe": {"exec": {"command": ["ready"]}}},
                           {"name": "setup", "image": "busybox:1.36"}],
        "containers": [{"name": "app", "image": "busybox:1.36"}]}}, where="test")
    proxy = container(pod, "proxy", RUNNING, hash=container_hash(pod.init_containers[0]))
    gave_up = {proxy.id: "Container proxy failed startup probe, will be restarted"}
    actions = compute_pod_actions(pod, state([sandbox()], [proxy]), gave_up, unstarted={proxy.id})
    assert actions.kill == gave_up and actions.start == ["proxy"]
    # Once started, one whose liveness probe gives up while the next init container runs, too.
    setup = container(pod, "setup", RUNNING, hash=container_hash(pod.init_containers[1]))
    actions = compute_pod_actions(pod, state([sandbox()], [proxy, setup]), gave_up)
    assert actions.kill == gave_up and actions.start == ["proxy"]
