"""The pod step history's bounds and collapsing: what a crash loop of a week costs, and what a
repeated failure looks like."""

from __future__ import annotations

from pykubelet.api.pod import parse_pod
from pykubelet.pods import history_records as limits
from pykubelet.pods.history import PodHistory
from pykubelet.runtime.state import ContainerState, PodRuntimeState
from tests.fakes.clock import ManualClock


def a_pod(name: str = "web", uid: str = "u1"):
    return parse_pod({"metadata": {"name": name, "namespace": "default", "uid": uid},
                      "spec": {"containers": [{"name": "app", "image": "busybox:1.36"}]}}, where="test")


def test_a_pod_keeps_its_first_and_latest_steps_and_counts_the_ones_between():
    clock = ManualClock()
    history, pod = PodHistory(clock), a_pod()
    for n in range(1000):
        clock.now += 1
        history.container_started(pod, "app", f"id{n}", n, 0.1)
    snap = history.snapshot("default", "web")
    assert len(snap["steps"]) == limits.HEAD_STEPS + limits.TAIL_STEPS
    assert snap["dropped"] == 1000 - limits.HEAD_STEPS - limits.TAIL_STEPS and snap["dropped_after"] == limits.HEAD_STEPS
    assert snap["steps"][0]["details"]["restart_count"] == 0  # how it came up
    assert snap["steps"][-1]["details"]["restart_count"] == 999  # what happens now


def test_a_repeated_failure_is_one_step_with_a_count_and_its_latest_retry():
    clock = ManualClock()
    history, pod = PodHistory(clock), a_pod()
    for _ in range(5):
        clock.now += 10
        history.image_failed(pod, "app", "x:1", "ErrImagePull", 'Failed to pull image "x:1": not found', 10)
        history.image_failed(pod, "app", "x:1", "ImagePullBackOff", 'Back-off pulling image "x:1"', 8)
    (step,) = history.snapshot("default", "web")["steps"]
    assert step["count"] == 5 and step["at"] == 1010 and step["last_at"] == 1050
    assert step["details"]["retry_at"] == 1060


def test_exits_are_recorded_once_from_the_runtime_state():
    clock = ManualClock()
    history = PodHistory(clock)
    running = ContainerState("c1", "app", "running", 0, "h", created_at=900, started_at=901)
    exited = ContainerState("c1", "app", "exited", 0, "h", created_at=900, started_at=901, finished_at=903.5,
                            exit_code=2, reason="Error")
    for state in (running, exited, exited):
        history.observe(PodRuntimeState("u1", "web", "default", containers=[state]))
    steps = history.snapshot("default", "web")["steps"]
    assert [s["text"] for s in steps] == ["running (found in the runtime), id c1",
                                          "exited with code 2 (Error) after 2.5s"]
    assert steps[1]["at"] == 903.5 and steps[1]["ok"] is False


def test_gone_pods_are_kept_for_a_while_then_forgotten():
    history = PodHistory(ManualClock())
    for n in range(limits.GONE_PODS + 10):
        history.admitted(a_pod(f"p{n}", f"u{n}"), [])
        history.terminated(f"u{n}", "default", f"p{n}")
    assert history.snapshot("default", "p0") is None
    last = history.snapshot("default", f"p{limits.GONE_PODS + 9}")
    assert last["gone_at"] and last["steps"][-1]["kind"] == "termination"
    assert len(history.pods()) == limits.GONE_PODS


def test_the_cni_chain_is_the_first_config_containerd_would_load(tmp_path):
    (tmp_path / "20-other.conflist").write_text('{"cniVersion": "1.0.0", "name": "b", "plugins": [{"type": "x"}]}')
    (tmp_path / "10-mine.conflist").write_text(
        '{"cniVersion": "1.0.0", "name": "a", "plugins": [{"type": "bridge"}, {"type": "portmap"}]}')
    assert limits.runtime_cni_chain(str(tmp_path)) == "bridge → portmap"
    assert limits.runtime_cni_chain(str(tmp_path / "nosuch")) == ""


def test_live_records_are_bounded_too():
    clock = ManualClock()
    history = PodHistory(clock)
    for n in range(limits.LIVE_PODS + 5):
        clock.now += 1
        history.admitted(a_pod(f"p{n}", f"u{n}"), [])  # rejected pods, say: nothing ends their record
    assert len(history._pods) == limits.LIVE_PODS and len(history._gone) == 5
    assert history.snapshot("default", "p0")["gone_at"]  # the oldest went first
