"""A step's result, told once, reaches every place a user looks: the log, the Events, the pod's
history (explain), the container's waiting reason, and when the pod is synced again."""

from __future__ import annotations

import logging

import pytest

from pykubelet.api.pod import parse_pod
from pykubelet.pods.history import PodHistory
from pykubelet.pods.step_reporter import StepReporter
from pykubelet.pods.step_result import (Action, BackOffFacts, Event, ImageFacts, LogLine, SandboxFacts, StartFacts,
                                        StepResult, StopFacts, SyncResult, VolumeFacts, Waiting, container_failure)


class Recorder:
    """The EventRecorder's one call, kept."""

    def __init__(self) -> None:
        self.events: list[tuple[dict, str, str, str]] = []

    def record(self, ref: dict, kind: str, reason: str, message: str) -> None:
        self.events.append((ref, kind, reason, message))


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


def a_pod():
    return parse_pod({"metadata": {"name": "web", "namespace": "shop", "uid": "u1"},
                      "spec": {"containers": [{"name": "app", "image": "busybox:1.36"}]}}, where="test")


def steps(history: PodHistory) -> list[dict]:
    snapshot = history.snapshot("shop", "web")
    return snapshot["steps"] if snapshot else []


def test_a_failed_step_is_told_in_the_log_the_events_the_history_the_waiting_reason_and_the_retry(caplog):
    recorder, history = Recorder(), PodHistory(Clock())
    reporter, sync = StepReporter(recorder, history), SyncResult()  # type: ignore[arg-type]
    failure = container_failure(Action.START_CONTAINER, "app", StartFacts(), "CreateContainerError", "bad mount",
                                retry_in=10.0, events=(Event("Warning", "Failed", "Error: bad mount", "app"),),
                                logs=(LogLine("error", "Failed to create container",
                                              (("container", "app"), ("err", "CreateContainer: UNKNOWN: bad mount"))),))
    with caplog.at_level(logging.INFO):
        reporter.report(a_pod(), failure, sync)
    assert [r.getMessage() for r in caplog.records] == [
        'Failed to create container pod="shop/web" container="app" err="CreateContainer: UNKNOWN: bad mount"']
    ((ref, kind, reason, message),) = recorder.events
    assert (ref["name"], ref["fieldPath"], kind, reason, message) == (
        "web", "spec.containers{app}", "Warning", "Failed", "Error: bad mount")
    (step,) = steps(history)
    assert (step["kind"], step["container"], step["ok"], step["text"]) == (
        "container", "app", False, "CreateContainerError: bad mount")
    assert step["details"]["retry_at"] == 1010.0
    assert sync.waiting == {"app": ("CreateContainerError", "bad mount")}
    assert sync.retry_in == 10.0


def test_the_next_sync_is_at_the_earliest_back_off_end_of_the_results():
    sync = SyncResult()
    assert sync.retry_in is None
    sync.add(StepResult(Action.SET_UP_VOLUMES, "", VolumeFacts(()), "FailedMount", "x", retry_in=30.0))
    sync.add(StepResult(Action.START_CONTAINER, "app", BackOffFacts(20.0, 1), "CrashLoopBackOff", retry_in=12.0))
    assert sync.retry_in == 12.0
    # A failed pull's back-off ends later, but its status moves on to ImagePullBackOff sooner.
    sync.add(StepResult(Action.PULL_IMAGE, "side", ImageFacts("x:1"), "ErrImagePull", retry_in=8.0, look_again_in=1.0))
    assert sync.retry_in == 1.0
    sync.retry_after(0.5)  # the worker's own (a deadline, a mirror pod to create)
    assert sync.retry_in == 0.5
    ended = SyncResult([StepResult(Action.PULL_IMAGE, "app", ImageFacts("x:1"), "ImagePullBackOff", retry_in=0.0)])
    assert ended.retry_in == 0.0  # a back-off that ends now is a sync now, not none


def test_a_later_result_for_a_container_replaces_its_waiting_reason():
    sync = SyncResult()
    sync.add(StepResult(Action.CREATE_SANDBOX, "", SandboxFacts(0), "FailedCreatePodSandBox", "no network",
                        waiting=(Waiting("app", "ContainerCreating", "Failed to create pod sandbox: no network"),
                                 Waiting("side", "ContainerCreating", "Failed to create pod sandbox: no network"))))
    sync.add(container_failure(Action.PULL_IMAGE, "side", ImageFacts("x:1"), "ErrImagePull", "not found"))
    assert sync.waiting == {"app": ("ContainerCreating", "Failed to create pod sandbox: no network"),
                            "side": ("ErrImagePull", "not found")}


ONE_OF_EACH = [
    (StepResult(Action.SET_UP_VOLUMES, "", VolumeFacts((("cfg", "configMap"),))), "volumes", True),
    (StepResult(Action.SET_UP_VOLUMES, "", VolumeFacts((("cfg", "configMap"),), (("cfg", "not found"),)),
                "FailedMount", "cfg: not found", retry_in=2.0), "volumes", False),
    (StepResult(Action.CREATE_SANDBOX, "0123456789abcdef", SandboxFacts(0, "10.1.0.5"), seconds=0.2), "sandbox", True),
    (StepResult(Action.CREATE_SANDBOX, "", SandboxFacts(1), "FailedCreatePodSandBox", "no network", retry_in=2.0),
     "sandbox", False),
    (StepResult(Action.PULL_IMAGE, "app", ImageFacts("busybox:1.36", (1.5, 2_000_000))), "image", True),
    (StepResult(Action.PULL_IMAGE, "app", ImageFacts("x:1"), "ErrImagePull", "denied", retry_in=10.0), "image", False),
    (StepResult(Action.START_CONTAINER, "app", StartFacts("c0ffee", 2), seconds=0.1), "container", True),
    (StepResult(Action.START_CONTAINER, "app", StartFacts(), "RunContainerError", "exec: no such file"),
     "container", False),
    (StepResult(Action.START_CONTAINER, "app", BackOffFacts(20.0, 1), "CrashLoopBackOff", "back-off", retry_in=15.0),
     "back-off", False),
    (StepResult(Action.KILL_CONTAINER, "app", StopFacts("u1", "shop", "web", "Stopping pod", 30, "", False),
                seconds=1.0), "stop", None),
]


@pytest.mark.parametrize("result,kind,ok", ONE_OF_EACH,
                         ids=lambda v: v.action.value if isinstance(v, StepResult) else "")
def test_every_result_is_a_step_of_the_pods_history(result, kind, ok):
    history = PodHistory(Clock())
    StepReporter(Recorder(), history).report(a_pod(), result)  # type: ignore[arg-type]
    (step,) = steps(history)
    assert (step["kind"], step["ok"]) == (kind, ok)
    assert step["container"] == (result.target if kind in ("image", "container", "back-off", "stop") else "")


def test_every_action_is_in_that_table():
    assert {result.action for result, _, _ in ONE_OF_EACH} == set(Action)


def test_waiting_out_a_back_off_adds_no_step_the_failure_before_it_tells_until_when():
    history = PodHistory(Clock())
    reporter = StepReporter(Recorder(), history)  # type: ignore[arg-type]
    reporter.report(a_pod(), StepResult(Action.CREATE_SANDBOX, "", SandboxFacts(1, in_backoff=True), "BackOff",
                                        retry_in=2.0))
    reporter.report(a_pod(), StepResult(Action.PULL_IMAGE, "app", ImageFacts("x:1"), "ImagePullBackOff",
                                        'Back-off pulling image "x:1"', retry_in=8.0))
    assert steps(history) == []


def test_the_stop_of_a_container_without_its_pods_spec_is_recorded_under_the_runtimes_names():
    recorder, history = Recorder(), PodHistory(Clock())
    StepReporter(recorder, history).report(None, StepResult(  # type: ignore[arg-type]
        Action.KILL_CONTAINER, "app", StopFacts("u1", "shop", "web", "Stopping pod", 0, "", True), seconds=0.0))
    (step,) = steps(history)
    assert step["text"] == "stopped (Stopping pod): SIGKILL at once (no grace period)"
    assert recorder.events == []  # an orphan has no pod to hang an Event on
