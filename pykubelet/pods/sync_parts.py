"""What a pod's sync works with, built in one place: the agent's build phase and the unit
harness call build_sync_parts, so tests run the pod path wired as production wires it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from pykubelet.kube.events import EventRecorder
from pykubelet.pods.container_start import ContainerStarter
from pykubelet.pods.history import PodHistory
from pykubelet.pods.admission import Allocatable
from pykubelet.pods.kill import PodBackoffs, PodKiller
from pykubelet.pods.resize_actuate import ResizeActuator
from pykubelet.pods.resize_state import ResizeState
from pykubelet.pods.step_reporter import StepReporter
from pykubelet.runtime.images import ImageManager
from pykubelet.runtime.service import Runtime
from pykubelet.runtime.specs import NodeFacts
from pykubelet.util.backoff import Backoff
from pykubelet.volumes import api as api_volumes


@dataclass(frozen=True)
class SyncParts:
    cri: Runtime
    node: NodeFacts
    api_volumes: api_volumes.ApiVolumes
    backoffs: PodBackoffs
    reporter: StepReporter
    killer: PodKiller
    starter: ContainerStarter
    resize_state: ResizeState
    resizer: ResizeActuator

    @property
    def history(self) -> PodHistory:
        return self.reporter.history


def build_sync_parts(cri: Runtime, images: ImageManager, recorder: EventRecorder, history: PodHistory,
                     node: NodeFacts | None = None, api: api_volumes.ApiClients | None = None,
                     clock: Callable[[], float] = time.time, allocatable: Allocatable | None = None) -> SyncParts:
    """`api` None: standalone, no ConfigMaps, Secrets, tokens or Services; `clock`: the wall
    clock the back-offs count on (the runtime's exit times are on it); `allocatable`: what a
    resize is admitted against (default: the node's cpu and memory in `node`)."""
    node = node or NodeFacts()
    volumes = api_volumes.ApiVolumes(node.root_dir, node.allocatable, api, node.node_name)
    # A failed volume set-up is tried again after the kubelet's per-operation back-off: 0.5 s,
    # doubling to 2 min 2 s.
    backoffs = PodBackoffs(restart=Backoff(clock=clock), mount=Backoff(initial=0.5, maximum=122.0, clock=clock),
                           sandbox=Backoff(initial=1.0, maximum=60.0, clock=clock))
    reporter = StepReporter(recorder, history)
    killer = PodKiller(cri, reporter, node, volumes, backoffs)
    starter = ContainerStarter(cri, images, backoffs.restart, reporter, node, api, killer.stop_container,
                               volumes.claims.mounts_of)
    allocatable = allocatable or Allocatable(0, int(node.allocatable.get("cpu", 0) * 1000),
                                             int(node.allocatable.get("memory", 0)))
    resize_state = ResizeState(node.root_dir, allocatable)
    return SyncParts(cri, node, volumes, backoffs, reporter, killer, starter, resize_state,
                     ResizeActuator(cri, node, resize_state))
