"""Wiring and lifecycle: builds the managers, runs their loops as named tasks, stops cleanly.

Stopping the agent (SIGTERM, or any of its loops dying) never stops a pod: containers keep
running under containerd, and the next agent adopts them from their CRI labels.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Awaitable

import tenacity

from pykubelet import KUBELET_VERSION
from pykubelet.api.sysctls import SysctlAllowlist
from pykubelet.config import Settings
from pykubelet.cri import errors
from pykubelet.cri.client import CRIClient
from pykubelet.kube.events import EventRecorder
from pykubelet.node.hostinfo import read_host_info
from pykubelet.network.manager import NetworkManager
from pykubelet.node.status import allocatable_memory_bytes
from pykubelet.pleg.relist import RelistPLEG
from pykubelet.pods.admission import Allocatable
from pykubelet.pods.dispatcher import PodDispatcher
from pykubelet.pods.sync import PodSyncer
from pykubelet.pods.worker import WorkerDeps
from pykubelet.probes.manager import ProbeManager
from pykubelet.runtime.dns import ClusterDNS
from pykubelet.runtime.images import ImageManager
from pykubelet.runtime.specs import NodeFacts
from pykubelet.server import local
from pykubelet.sources.static_files import StaticPodSource
from pykubelet.status.manager import StatusManager
from pykubelet.util.backoff import Backoff
from pykubelet.util.durations import format_duration
from pykubelet.util.hostip import default_route_ip
from pykubelet.util.log import get_logger
from pykubelet.volumes import local as local_volumes

log = get_logger(__name__)

HOUSEKEEPING_SECONDS = 2.0  # the kubelet's housekeeping period
PLEG_THRESHOLD_SECONDS = 180.0
IMAGEFS_DIR = "/var/lib/containerd"


class LoopDied(RuntimeError):
    """One of the agent's long-running loops ended; the agent stops (pods keep running)."""


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


class Agent:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.ready = asyncio.Event()
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def _spawn(self, name: str, coro: Awaitable[None]) -> None:
        self._tasks[name] = asyncio.create_task(coro, name=name)  # type: ignore[arg-type]

    def _loops_alive(self) -> bool:
        return all(not t.done() for t in self._tasks.values())

    async def run(self) -> None:
        s = self.settings
        cri = CRIClient(s.runtime.endpoint, s.runtime.image_endpoint, slow_timeout=s.runtime.request_timeout)
        kube = None
        runner = None
        kubelet_server = None
        dispatcher = None
        api_clients = None
        try:
            if s.cluster.kubeconfig:
                from pykubelet.kube.client import KubeClient  # costs ~40 MB: only when joining a cluster

                kube = await KubeClient.from_kubeconfig(s.cluster.kubeconfig, s.cluster.api_qps, s.cluster.api_burst,
                                                        user_agent=f"pykubelet/{KUBELET_VERSION}")
            runtime = await wait_for_runtime(cri)
            log.info("Connected to the container runtime", endpoint=s.runtime.endpoint, runtime=runtime,
                     node=s.node_name, apiserver=kube.host if kube else "none (standalone)")
            node_ip = s.cluster.node_ip or await default_route_ip()
            host_info = read_host_info(s.root_dir)
            node_allocatable = Allocatable(pods=s.pods.max_pods, cpu_millis=host_info.cpus * 1000,
                                           memory_bytes=allocatable_memory_bytes(host_info, s.cluster.eviction_hard))
            recorder = EventRecorder(kube, s.node_name)
            statuses = StatusManager(kube)
            node_facts = NodeFacts(
                node_name=s.node_name, host_ip=node_ip, memory_capacity=host_info.memory_bytes,
                allocatable={"cpu": float(host_info.cpus), "memory": float(node_allocatable.memory_bytes)},
                dns=ClusterDNS(tuple(s.cluster.cluster_dns), s.cluster.cluster_domain, s.cluster.resolv_conf),
                root_dir=s.root_dir, seccomp_root=os.path.join(s.root_dir, "seccomp"))
            if kube is not None:
                from pykubelet.kube.objects import ObjectCache, ServiceCache
                from pykubelet.kube.tokens import TokenManager
                from pykubelet.volumes.api import ApiClients

                # A changed ConfigMap or Secret wakes the pods that read it (dispatcher: just below).
                api_clients = ApiClients(ObjectCache(kube, lambda uid: dispatcher.wake(uid) if dispatcher else None),
                                         TokenManager(kube), ServiceCache(kube))
                self._spawn("service-watch", api_clients.services.run())
            syncer = PodSyncer(cri, ImageManager(cri, Backoff()), Backoff(), s.pods.pod_logs_dir, recorder,
                               node_facts, api_clients)
            deps = WorkerDeps(cri, syncer, statuses, recorder, lambda: node_ip, s.pods.sync_frequency)
            dispatcher = PodDispatcher(deps, statuses, s.node_name, lambda: node_allocatable,
                                       SysctlAllowlist.build(s.pods.allowed_unsafe_sysctls))
            deps.probes = ProbeManager(cri, recorder, dispatcher.wake)
            pleg = RelistPLEG(cri, dispatcher.wake)
            # --- the kubelet API on :10250 (server/kubelet_api.py), listening before the Node registers
            if s.server.port:
                from pykubelet.server import kubelet_api
                from pykubelet.server.host import Host
                review = (lambda path, body: kube.create(path, body)) if kube is not None else None
                try:
                    kubelet_server = await kubelet_api.start(Host(
                        s, cri, [node_ip], statuses.pods, {"pleg": pleg.healthy, "syncloop": self._loops_alive},
                        review))
                except (kubelet_api.BindError, kubelet_api.tls.TLSError) as e:
                    raise LoopDied(str(e)) from None
            # --- end of the kubelet API
            sources_ready: list[asyncio.Event] = []
            if s.pods.static_pod_path:
                source = StaticPodSource(s.pods.static_pod_path, s.node_name, s.pods.file_check_frequency,
                                         lambda pods: dispatcher.set_pods(pods, "file"))
                sources_ready.append(source.ready)
                self._spawn("static-pod-source", source.run())
            network = NetworkManager(s.network, cri, s.root_dir, s.node_name, kube)
            self._spawn("network", network.run())
            if kube is not None:
                sources_ready.append(self._join_cluster(kube, cri, recorder, statuses, deps, dispatcher, pleg,
                                                        network, host_info, node_ip))
            self._spawn("pleg", pleg.run())
            self._spawn("housekeeping", self._housekeeping(dispatcher, pleg, sources_ready))
            if s.server.healthz_port:
                app = local.build_app(statuses, {"pleg": pleg.healthy, "syncloop": self._loops_alive})
                runner = await local.serve(app, s.server.healthz_bind_address, s.server.healthz_port)
            self.ready.set()
            done, _ = await asyncio.wait(self._tasks.values(), return_when=asyncio.FIRST_COMPLETED)
            task = done.pop()
            raise LoopDied(f"loop {task.get_name()} ended: {task.exception() or 'returned'}")
        finally:
            for task in self._tasks.values():
                task.cancel()
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)
            if dispatcher is not None:
                await dispatcher.stop()
            if api_clients is not None:
                await api_clients.objects.close()
            if runner is not None:
                await runner.cleanup()
            if kubelet_server is not None:
                await kubelet_server.close()
            if kube is not None:
                await kube.close()
            await cri.close()

    def _join_cluster(self, kube, cri, recorder, statuses, deps, dispatcher, pleg, network, host_info,
                      node_ip) -> asyncio.Event:
        """Start the node manager, events, status writes and the apiserver pod source."""
        from pykubelet.node.manager import NodeManager
        from pykubelet.pods.mirror import MirrorPods
        from pykubelet.sources.apiserver import ApiserverPodSource

        s = self.settings

        def agent_errors() -> list[str]:
            errs = [f"network plugin is not ready: {network.problem}"] if network.problem else []
            if pleg.healthy(PLEG_THRESHOLD_SECONDS):
                return errs
            seen = time.time() - pleg.last_relist if pleg.last_relist else PLEG_THRESHOLD_SECONDS
            return [f"PLEG is not healthy: pleg was last seen active {format_duration(seen)} ago; "
                    f"threshold is {format_duration(PLEG_THRESHOLD_SECONDS)}", *errs]

        node = NodeManager(kube, cri, recorder, node_name=s.node_name, host_info=host_info, node_ip=node_ip,
                           labels=s.cluster.node_labels, max_pods=s.pods.max_pods,
                           thresholds=s.cluster.eviction_hard, root_dir=s.root_dir, imagefs_dir=IMAGEFS_DIR,
                           kubelet_version=KUBELET_VERSION, update_seconds=s.cluster.status_update_seconds,
                           report_seconds=s.cluster.status_report_seconds,
                           lease_seconds=s.cluster.lease_duration_seconds, agent_errors=agent_errors,
                           kubelet_port=s.server.port)
        mirrors = MirrorPods(kube, s.node_name, lambda: node.node_uid, dispatcher.wake)
        deps.mirrors = mirrors

        def on_api_pods(pods) -> None:
            mirrors.update(p for p in pods if p.is_mirror)
            dispatcher.set_pods((p for p in pods if not p.is_mirror), "api")

        source = ApiserverPodSource(kube, s.node_name, on_api_pods)

        async def wake_static_pods_once_registered() -> None:
            await node.registered.wait()  # mirror pods need the Node's UID as their owner
            for uid in list(dispatcher.workers):
                dispatcher.wake(uid)
            await asyncio.Event().wait()

        async def report_network_ready() -> None:
            await network.ready.wait()  # Ready may turn True now, not at the next status period
            node.nudge()
            await asyncio.Event().wait()

        if s.cluster.register_node:
            self._spawn("node-status", node.run())
            self._spawn("network-ready-report", report_network_ready())
            self._spawn("mirror-pods", wake_static_pods_once_registered())
        self._spawn("apiserver-pod-source", source.run())
        self._spawn("status-manager", statuses.run())
        self._spawn("events", recorder.run())
        return source.ready

    async def _housekeeping(self, dispatcher: PodDispatcher, pleg: RelistPLEG,
                            sources_ready: list[asyncio.Event]) -> None:
        # Only once every source has spoken, or pods not yet read would count as orphans.
        for event in sources_ready:
            await event.wait()
        while True:
            await pleg.relisted.wait()
            dispatcher.housekeeping(pleg.runtime_uids, pleg.snapshot_time)
            known = set(dispatcher.desired) | set(dispatcher.workers) | set(pleg.runtime_uids)
            for uid in await asyncio.to_thread(local_volumes.remove_orphaned_pod_dirs, self.settings.root_dir, known):
                log.info("Removed the directory of an orphaned pod", uid=uid)
            await asyncio.sleep(HOUSEKEEPING_SECONDS)
