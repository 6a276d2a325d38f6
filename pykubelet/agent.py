"""Wiring and lifecycle, in four phases: build the parts, start their loops, wait until one dies
(or the agent is cancelled), stop.

Build order follows who needs whom: the wake-up path and the runtime cache exist before
everything that wakes pods, and each part gets what it needs when it is made (no callbacks
patched in later). Stopping the agent (SIGTERM, or any of its loops dying) never stops a pod:
containers keep running under containerd, and the next agent adopts them from their CRI labels.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from typing import Any

import tenacity

from pykubelet import KUBELET_VERSION
from pykubelet.api.sysctls import SysctlAllowlist
from pykubelet.config import Settings
from pykubelet.cri import errors
from pykubelet.cri.client import CRIClient
from pykubelet.kube.events import EventRecorder
from pykubelet.network.manager import NetworkManager
from pykubelet.node.hostinfo import HostInfo, read_host_info
from pykubelet.node.status import allocatable_memory_bytes
from pykubelet.pleg.cache import RuntimeCache
from pykubelet.pleg.relist import HEALTHY_WITHIN_SECONDS, RelistPLEG
from pykubelet.pods.admission import Allocatable
from pykubelet.pods.dispatcher import PodDispatcher
from pykubelet.pods.housekeeping import housekeeping
from pykubelet.pods.sync import PodSyncer
from pykubelet.pods.wakeups import Wakeups
from pykubelet.pods.worker import WorkerDeps
from pykubelet.probes.manager import ProbeManager
from pykubelet.runtime.dns import ClusterDNS
from pykubelet.runtime.images import ImageManager
from pykubelet.runtime.specs import NodeFacts
from pykubelet.server import local
from pykubelet.server.stats import IMAGEFS_DIR
from pykubelet.sources.static_files import StaticPodSource
from pykubelet.status.manager import StatusManager
from pykubelet.util.backoff import Backoff
from pykubelet.util.durations import format_duration
from pykubelet.util.hostip import default_route_ip
from pykubelet.util.log import get_logger
from pykubelet.util.tasks import LoopDied, Tasks, after

log = get_logger(__name__)

__all__ = ["Agent", "LoopDied"]


async def wait_for_runtime(cri: CRIClient) -> str:
    """Block until the runtime answers Version; returns "<name>://<version>"."""
    async for attempt in tenacity.AsyncRetrying(
            retry=tenacity.retry_if_exception_type(errors.CRIError),
            wait=tenacity.wait_exponential(multiplier=0.2, max=10),
            before_sleep=lambda state: log.warning(
                "Container runtime not answering yet; retrying", endpoint=cri.endpoint,
                err=str(state.outcome.exception()) if state.outcome else "")):
        with attempt:
            version = await cri.version()
    return f"{version.runtime_name}://{version.runtime_version}"


@dataclass
class Parts:
    """What `build` made; `stop` closes what is set."""

    cri: CRIClient
    kube: Any = None  # KubeClient, imported only when joining a cluster
    api_clients: Any = None  # volumes.api.ApiClients
    dispatcher: PodDispatcher | None = None
    closers: list[Any] = field(default_factory=list)  # awaitables' factories, run in reverse


class Agent:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.ready = asyncio.Event()
        self.tasks = Tasks()

    async def run(self) -> None:
        s = self.settings
        parts = Parts(CRIClient(s.runtime.endpoint, s.runtime.image_endpoint, slow_timeout=s.runtime.request_timeout))
        try:
            await self._build_and_start(parts)
            self.ready.set()
            raise await self.tasks.first_death()
        finally:
            await self._stop(parts)

    async def _build_and_start(self, parts: Parts) -> None:
        """Build every part in dependency order and start its loops (phases build and start)."""
        s, tasks, cri = self.settings, self.tasks, parts.cri
        if s.cluster.kubeconfig:
            from pykubelet.kube.client import KubeClient  # costs ~40 MB: only when joining a cluster

            parts.kube = await KubeClient.from_kubeconfig(s.cluster.kubeconfig, s.cluster.api_qps, s.cluster.api_burst,
                                                          user_agent=f"pykubelet/{KUBELET_VERSION}")
        kube = parts.kube
        runtime = await wait_for_runtime(cri)
        log.info("Connected to the container runtime", endpoint=s.runtime.endpoint, runtime=runtime,
                 node=s.node_name, apiserver=kube.host if kube else "none (standalone)")
        node_ip = s.cluster.node_ip or await default_route_ip()
        host_info = read_host_info(s.root_dir)
        allocatable = Allocatable(pods=s.pods.max_pods, cpu_millis=host_info.cpus * 1000,
                                  memory_bytes=allocatable_memory_bytes(host_info, s.cluster.eviction_hard))
        # --- the wake-up path and the runtime cache come first: everything below wakes pods
        wakeups, cache = Wakeups(), RuntimeCache()
        recorder = EventRecorder(kube, s.node_name)
        pleg = RelistPLEG(cri, cache, wakeups.wake, time.time)
        network = NetworkManager(s.network, cri, s.root_dir, s.node_name, kube)
        health = {"pleg": pleg.healthy, "syncloop": tasks.alive}
        node = mirrors = None
        if kube is not None and s.cluster.register_node:
            node = self._node_manager(kube, cri, recorder, host_info, node_ip, pleg, network)
            from pykubelet.pods.mirror import MirrorPods
            mirrors = MirrorPods(kube, s.node_name, lambda: node.node_uid, wakeups.wake)
        statuses = StatusManager(kube, mirrors)
        if kube is not None:
            from pykubelet.kube.objects import ObjectCache, ServiceCache
            from pykubelet.kube.tokens import TokenManager
            from pykubelet.volumes.api import ApiClients

            # A changed ConfigMap or Secret wakes the pods that read it.
            parts.api_clients = ApiClients(ObjectCache(kube, wakeups.wake), TokenManager(kube), ServiceCache(kube))
            tasks.loop("service-watch", parts.api_clients.services.run())
        node_facts = NodeFacts(
            node_name=s.node_name, host_ip=node_ip, memory_capacity=host_info.memory_bytes,
            allocatable={"cpu": float(host_info.cpus), "memory": float(allocatable.memory_bytes)},
            dns=ClusterDNS(tuple(s.cluster.cluster_dns), s.cluster.cluster_domain, s.cluster.resolv_conf),
            root_dir=s.root_dir, seccomp_root=os.path.join(s.root_dir, "seccomp"), pod_logs_dir=s.pods.pod_logs_dir)
        syncer = PodSyncer(cri, ImageManager(cri, Backoff()), Backoff(), recorder, node_facts, parts.api_clients)
        deps = WorkerDeps(cache=cache, syncer=syncer, statuses=statuses, recorder=recorder,
                          probes=ProbeManager(cri, recorder, wakeups.wake), wakeups=wakeups, host_ip=node_ip,
                          resync_seconds=s.pods.sync_frequency, mirrors=mirrors)
        dispatcher = parts.dispatcher = PodDispatcher(deps, s.node_name, allocatable,
                                                      SysctlAllowlist.build(s.pods.allowed_unsafe_sysctls))
        # --- the kubelet API on :10250 (server/kubelet_api.py), listening before the Node registers
        if s.server.port:
            await self._serve_kubelet_api(parts, statuses, [node_ip], health)
        # --- the pod sources, last: they hand pods to the dispatcher
        sources_ready: list[asyncio.Event] = []
        if s.pods.static_pod_path:
            source = StaticPodSource(s.pods.static_pod_path, s.node_name, s.pods.file_check_frequency,
                                     lambda pods: dispatcher.set_pods(pods, "file"))
            sources_ready.append(source.ready)
            tasks.loop("static-pod-source", source.run())
        tasks.loop("network", network.run())
        if kube is not None:
            sources_ready.append(self._start_cluster_parts(kube, recorder, statuses, dispatcher, node, mirrors,
                                                           network, wakeups))
        tasks.loop("pleg", pleg.run())
        tasks.loop("housekeeping", housekeeping(dispatcher, cache, pleg.relisted, sources_ready, s.root_dir))
        if s.server.healthz_port:
            runner = await local.serve(local.build_app(statuses, health), s.server.healthz_bind_address,
                                       s.server.healthz_port)
            parts.closers.append(runner.cleanup)

    async def _serve_kubelet_api(self, parts: Parts, statuses: StatusManager, node_ips: list[str],
                                 health: dict) -> None:
        from pykubelet.server import kubelet_api
        from pykubelet.server.host import Host

        kube = parts.kube
        review = (lambda path, body: kube.create(path, body)) if kube is not None else None
        try:
            server = await kubelet_api.start(Host(self.settings, parts.cri, node_ips, statuses.pods, health, review))
        except (kubelet_api.BindError, kubelet_api.tls.TLSError) as e:
            raise LoopDied(str(e)) from None
        parts.closers.append(server.close)

    def _node_manager(self, kube, cri: CRIClient, recorder: EventRecorder, host_info: HostInfo, node_ip: str,
                      pleg: RelistPLEG, network: NetworkManager):
        from pykubelet.node.manager import NodeManager

        s = self.settings

        def agent_errors() -> list[str]:
            errs = [f"network plugin is not ready: {network.problem}"] if network.problem else []
            if pleg.healthy():
                return errs
            seen = time.time() - pleg.last_relist if pleg.last_relist else HEALTHY_WITHIN_SECONDS
            return [f"PLEG is not healthy: pleg was last seen active {format_duration(seen)} ago; "
                    f"threshold is {format_duration(HEALTHY_WITHIN_SECONDS)}", *errs]

        return NodeManager(kube, cri, recorder, node_name=s.node_name, host_info=host_info, node_ip=node_ip,
                           labels=s.cluster.node_labels, max_pods=s.pods.max_pods,
                           thresholds=s.cluster.eviction_hard, root_dir=s.root_dir, imagefs_dir=IMAGEFS_DIR,
                           kubelet_version=KUBELET_VERSION, update_seconds=s.cluster.status_update_seconds,
                           report_seconds=s.cluster.status_report_seconds,
                           lease_seconds=s.cluster.lease_duration_seconds, agent_errors=agent_errors,
                           kubelet_port=s.server.port)

    def _start_cluster_parts(self, kube, recorder: EventRecorder, statuses: StatusManager,
                             dispatcher: PodDispatcher, node, mirrors, network: NetworkManager,
                             wakeups: Wakeups) -> asyncio.Event:
        """Start the node manager, events, status writes and the apiserver pod source."""
        from pykubelet.sources.apiserver import ApiserverPodSource

        def on_api_pods(pods) -> None:
            if mirrors is not None:
                mirrors.update(p for p in pods if p.is_mirror)
            dispatcher.set_pods((p for p in pods if not p.is_mirror), "api")

        source = ApiserverPodSource(kube, self.settings.node_name, on_api_pods)
        if node is not None:
            self.tasks.loop("node-status", node.run())
            # Ready may turn True now, not at the next status period.
            self.tasks.once("network-ready-report", after(network.ready, node.nudge))
            # Mirror pods need the Node's UID as their owner: sync the static pods again.
            self.tasks.once("mirror-pods", after(node.registered, wakeups.wake_all))
        self.tasks.loop("apiserver-pod-source", source.run())
        self.tasks.loop("status-manager", statuses.run())
        self.tasks.loop("events", recorder.run())
        return source.ready

    async def _stop(self, parts: Parts) -> None:
        """Phase stop: the loops, the workers (never their pods), then every connection."""
        await self.tasks.stop()
        if parts.dispatcher is not None:
            await parts.dispatcher.stop()
        if parts.api_clients is not None:
            await parts.api_clients.objects.close()
        for close in reversed(parts.closers):
            await close()
        if parts.kube is not None:
            await parts.kube.close()
        await parts.cri.close()
