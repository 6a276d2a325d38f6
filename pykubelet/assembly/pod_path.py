"""The pod path, built one way for the agent and for the unit tests' core (tests/unit/core/harness.py):
the wake-up path (wake-ups, runtime cache, Event recorder, PLEG) first, since everything after it
wakes pods or records Events; then statuses, probes, the syncer, the workers' deps, the dispatcher.

Two steps, because the cluster-only parts (the Node, its mirror pods, the ConfigMap and Secret
caches) need the wake-up path and are needed by the rest: the agent makes them in between.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Sequence

from pykubelet.api.sysctls import SysctlAllowlist
from pykubelet.kube.events import EventRecorder
from pykubelet.pleg.cache import RuntimeCache
from pykubelet.pleg.relist import RelistPLEG
from pykubelet.pods.admission import Allocatable
from pykubelet.pods.dispatcher import PodDispatcher
from pykubelet.pods.history import PodHistory
from pykubelet.pods.sync import PodSyncer
from pykubelet.pods.sync_parts import build_sync_parts
from pykubelet.pods.wakeups import Wakeups
from pykubelet.pods.worker import WorkerDeps
from pykubelet.probes.manager import ProbeManager
from pykubelet.runtime.credentials.node_config import NodeDockerConfig
from pykubelet.runtime.credentials.pull_credentials import PluginCredentials, PullCredentials
from pykubelet.runtime.images import ImageManager
from pykubelet.runtime.service import Runtime
from pykubelet.runtime.specs import NodeFacts
from pykubelet.status.manager import StatusManager
from pykubelet.util.backoff import Backoff
from pykubelet.util.tasks import Tasks

if TYPE_CHECKING:  # joining a cluster only: these stay unimported on a standalone node
    from pykubelet.kube.client import KubeClient
    from pykubelet.pods.mirror import MirrorPods
    from pykubelet.volumes.api import ApiClients


@dataclass(frozen=True)
class WakePath:
    """What wakes pods and what records their Events: made first, everything else uses them."""

    wakeups: Wakeups
    cache: RuntimeCache
    recorder: EventRecorder
    pleg: RelistPLEG


@dataclass(frozen=True)
class PodPathSettings:
    """What the pod path takes from the settings (and the host)."""

    node: NodeFacts
    allocatable: Allocatable
    resync_seconds: float
    sysctls: SysctlAllowlist = field(default_factory=SysctlAllowlist.build)  # safe + allowedUnsafeSysctls
    cni_chain: Callable[[], str] | None = None  # the plugins a sandbox gets, for the pods' history
    credential_plugins: PluginCredentials | None = None  # --image-credential-provider-config's plugins
    pressure: Callable[[], Sequence[str]] = tuple  # the node's pressure conditions, for admission
    shutting_down: Callable[[], bool] = lambda: False  # a graceful node shutdown is under way, for admission


@dataclass(frozen=True)
class PodPath:
    """The pod path, complete: the dispatcher hands pods to workers that sync them through the
    syncer, report through the status manager and act on the probes' results."""

    wake: WakePath
    statuses: StatusManager
    probes: ProbeManager
    history: PodHistory
    deps: WorkerDeps
    dispatcher: PodDispatcher

    def start(self, tasks: Tasks) -> None:
        """Its loops: the PLEG's relist and, on a node that reports to an apiserver, the statuses."""
        tasks.loop("pleg", self.wake.pleg.run())
        if self.statuses.kube is not None:
            tasks.loop("status-manager", self.statuses.run())

    async def stop(self) -> None:
        """After the loops (Tasks.stop): the workers, then the probes; never a pod."""
        await self.dispatcher.stop()
        await self.probes.stop()


def build_wake_path(runtime: Runtime, node: NodeFacts, kube: KubeClient | None = None,
                    clock: Callable[[], float] = time.time) -> WakePath:
    wakeups, cache = Wakeups(), RuntimeCache()
    return WakePath(wakeups, cache, EventRecorder(kube, node.node_name),
                    RelistPLEG(runtime, cache, wakeups.wake, clock, node.root_dir))


def build_pod_path(wake: WakePath, runtime: Runtime, settings: PodPathSettings, *,
                   clock: Callable[[], float] = time.time, kube: KubeClient | None = None,
                   mirrors: MirrorPods | None = None, api_clients: ApiClients | None = None) -> PodPath:
    """`kube`, `mirrors` and `api_clients` are None on a standalone node."""
    statuses = StatusManager(kube, mirrors)
    history = PodHistory(clock, cni_chain=settings.cni_chain)
    credentials = PullCredentials(api_clients.objects if api_clients is not None else None,
                                  settings.credential_plugins, NodeDockerConfig(settings.node.root_dir))
    images = ImageManager(runtime, Backoff(clock=clock), credentials)
    syncer = PodSyncer(build_sync_parts(runtime, images, wake.recorder, history, settings.node, api_clients, clock,
                                        settings.allocatable))
    probes = ProbeManager(runtime, wake.recorder, wake.wakeups.wake, clock, observe=history.probe)
    deps = WorkerDeps(cache=wake.cache, syncer=syncer, statuses=statuses, recorder=wake.recorder, probes=probes,
                      wakeups=wake.wakeups, host_ip=settings.node.host_ip, resync_seconds=settings.resync_seconds,
                      mirrors=mirrors, clock=clock)
    dispatcher = PodDispatcher(deps, settings.node.node_name, settings.allocatable, settings.sysctls, settings.pressure,
                               settings.shutting_down)
    return PodPath(wake, statuses, probes, history, deps, dispatcher)
