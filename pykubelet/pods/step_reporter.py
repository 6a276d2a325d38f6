"""Tells a step's result everywhere it is told: the agent's log, the pod's Events, the pod's
history (what `pykubelet explain` reads), and the sync's result (the containers' waiting
reasons and the next retry, which the worker reads).

Every outcome of the pod path goes through report(), so the history holds each one by
construction: explain cannot miss a failure that the log or the Events show.
"""

from __future__ import annotations

from pykubelet.api.pod import Pod
from pykubelet.kube.events import EventRecorder, pod_ref
from pykubelet.pods.history import PodHistory
from pykubelet.pods.step_result import (BackOffFacts, ImageFacts, SandboxFacts, StartFacts, StepResult, StopFacts,
                                        SyncResult, VolumeFacts)
from pykubelet.util.log import get_logger

log = get_logger(__name__)


class StepReporter:
    def __init__(self, recorder: EventRecorder, history: PodHistory):
        self.recorder = recorder
        self.history = history

    def event(self, pod: Pod, container: str | None, kind: str, reason: str, message: str) -> None:
        """An Event that narrates progress (Pulling, Created, Killing...) rather than an outcome."""
        self.recorder.record(pod_ref(pod.namespace, pod.name, pod.uid, container), kind, reason, message)

    def report(self, pod: Pod | None, result: StepResult, into: SyncResult | None = None) -> StepResult:
        """Log it, record its Events and its history step, and add it to the sync's result.

        `pod` None: one the runtime holds without a spec (an orphan): no Events, none to name."""
        for line in result.logs:
            getattr(log, line.level)(line.text, pod=pod.full_name if pod is not None else "", **dict(line.fields))
        if pod is not None:
            for event in result.events:
                self.event(pod, event.container, event.type, event.reason, event.message)
        self._record(pod, result)
        if into is not None:
            into.add(result)  # the waiting reasons and the next retry come from here
        return result

    def _record(self, pod: Pod | None, result: StepResult) -> None:
        """The result as a step of the pod's history (pods/history.py words each kind of step)."""
        history, facts, target = self.history, result.facts, result.target
        if isinstance(facts, StopFacts):
            history.stopped(facts.uid, facts.namespace, facts.name, target, facts.why, facts.grace, facts.pre_stop,
                            result.seconds or 0.0, facts.killed)
            return
        assert pod is not None, f"{result.action.value} needs the pod's spec"
        if isinstance(facts, VolumeFacts):
            history.volumes(pod, dict(facts.kinds), dict(facts.failed), result.retry_in)
        elif isinstance(facts, SandboxFacts):
            if result.ok:
                history.sandbox_created(pod, target, facts.attempt, facts.ip, result.seconds or 0.0, dict(facts.info))
            elif not facts.in_backoff:  # waiting out a failure: the failure's step says until when
                history.sandbox_failed(pod, facts.attempt, result.message, result.retry_in or 0.0)
        elif isinstance(facts, ImageFacts):
            if result.ok:
                history.image_ready(pod, target, facts.image, facts.pulled)
            else:
                history.image_failed(pod, target, facts.image, result.reason, result.message, result.retry_in or 0.0)
        elif isinstance(facts, BackOffFacts):
            history.restart_backoff(pod, target, facts.delay, result.retry_in or 0.0, facts.exit_code)
        elif result.ok:
            assert isinstance(facts, StartFacts)
            history.container_started(pod, target, facts.container_id, facts.restart_count, result.seconds or 0.0)
        else:
            history.container_failed(pod, target, result.reason, result.message, result.retry_in)
