"""What one action of a sync came to, as data: the kubelet's SyncResult and BackoffError in one.

An action (set up volumes, create the sandbox, pull an image, start a container, stop one)
ends in a StepResult: what was done, to which target, whether it worked (else the kubelet's
reason and message), and when its back-off ends. The result also says what to tell: the log
lines and Events of the outcome, and which containers it keeps waiting. pods/step_reporter.py
tells it everywhere at once; nothing else reports an outcome.

A sync collects its results in a SyncResult, the worker's view of the sync: the containers'
waiting reasons and the next retry are derived from the results, never set by hand.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Protocol, Union


class Action(enum.Enum):
    """What was done (the kubelet's SyncAction, plus the steps it reports elsewhere)."""

    SET_UP_VOLUMES = "SetUpVolumes"
    CREATE_SANDBOX = "CreatePodSandbox"
    PULL_IMAGE = "PullImage"
    START_CONTAINER = "StartContainer"
    KILL_CONTAINER = "KillContainer"


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event about the pod (about one of its containers when `container` is set)."""

    type: str
    reason: str
    message: str
    container: str | None = None


@dataclass(frozen=True)
class LogLine:
    """One line of the agent's log; the reporter puts the pod first, as every pod line has it."""

    level: str
    """"info", "warning" or "error"."""
    text: str
    fields: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class Waiting:
    """A container this outcome keeps from running, with the waiting reason its status shows."""

    container: str
    reason: str
    message: str = ""


# The facts behind an outcome, per action: what the pod's history records beside the text.
@dataclass(frozen=True)
class VolumeFacts:
    kinds: tuple[tuple[str, str], ...]
    """The pod's API volumes set up: (name, kind)."""
    failed: tuple[tuple[str, str], ...] = ()
    """(name, why) of those that could not be."""


@dataclass(frozen=True)
class SandboxFacts:
    attempt: int
    ip: str = ""
    info: tuple[tuple[str, str], ...] = ()
    """The runtime's verbose status (netns, CNI result)."""
    in_backoff: bool = False
    """Not tried: the back-off of an earlier failure has not ended."""


@dataclass(frozen=True)
class ImageFacts:
    image: str
    pulled: tuple[float, int] | None = None
    """(seconds, bytes) when it was pulled now; None when it was already there."""


@dataclass(frozen=True)
class StartFacts:
    container_id: str = ""
    restart_count: int = 0


@dataclass(frozen=True)
class BackOffFacts:
    """A container that exited waits out its restart back-off (CrashLoopBackOff)."""

    delay: float
    exit_code: int


@dataclass(frozen=True)
class StopFacts:
    uid: str
    namespace: str
    name: str
    """The pod's, also for one the runtime holds without a spec (an orphan)."""
    why: str
    grace: int
    pre_stop: str
    """How its preStop hook went ("" without one)."""
    killed: bool
    """Whether it took a SIGKILL."""


Facts = Union[VolumeFacts, SandboxFacts, ImageFacts, StartFacts, BackOffFacts, StopFacts]


@dataclass(frozen=True)
class StepResult:
    action: Action
    target: str
    """The container's name, the volume's, or the sandbox's ID ("" for the pod's volumes as a whole)."""
    facts: Facts
    reason: str = ""
    """"" when it worked; else why not, the kubelet's word (ErrImagePull, CrashLoopBackOff...)."""
    message: str = ""
    retry_in: float | None = None
    """Seconds until its back-off ends: when the action is tried again (None: no back-off)."""
    look_again_in: float | None = None
    """Sooner than `retry_in`, when the sync should look again: a failed pull's status moves on to
    ImagePullBackOff within a second, as the kubelet's does."""
    seconds: float | None = None
    """How long the action took."""
    events: tuple[Event, ...] = ()
    logs: tuple[LogLine, ...] = ()
    waiting: tuple[Waiting, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.reason

    @property
    def next_look(self) -> float | None:
        """When the sync should run again for this outcome (None: nothing to wait for)."""
        return self.look_again_in if self.look_again_in is not None else self.retry_in


def container_failure(action: Action, container: str, facts: Facts, reason: str, message: str,
                      **tell: Any) -> StepResult:
    """A container's step that failed: the container waits, its status showing the reason."""
    return StepResult(action, container, facts, reason, message, waiting=(Waiting(container, reason, message),), **tell)


class _Named(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def uid(self) -> str: ...


def pod_desc(pod: _Named) -> str:
    """How the kubelet names a pod in messages: name_namespace(uid)."""
    return f"{pod.name}_{pod.namespace}({pod.uid})"


@dataclass
class SyncResult:
    """One sync's outcomes, as the worker reads them."""

    results: list[StepResult] = field(default_factory=list)
    changed: bool = False
    """Whether the runtime was touched (the state must be read again)."""
    resized: bool = False
    """Containers were resized in place: the runtime's state changed where no listing shows it."""
    resize_error: str = ""
    """Why an in-place resize failed this time (PodResizeInProgress reason Error)."""
    _sooner: float | None = None  # a retry the worker adds (a mirror pod to create, a deadline)

    def add(self, result: StepResult) -> None:
        self.results.append(result)

    @property
    def waiting(self) -> dict[str, tuple[str, str]]:
        """Container name -> (reason, message) for containers that could not start this time."""
        return {w.container: (w.reason, w.message) for r in self.results for w in r.waiting}

    @property
    def retry_in(self) -> float | None:
        """Seconds until the earliest back-off ends: the worker syncs again then."""
        looks = [r.next_look for r in self.results if r.next_look is not None]
        if self._sooner is not None:
            looks.append(self._sooner)
        return min(looks) if looks else None

    def retry_after(self, seconds: float) -> None:
        self._sooner = seconds if self._sooner is None else min(self._sooner, seconds)
