"""Wiring and lifecycle, in four phases: build the parts, start their loops, wait until one dies
(or the agent is cancelled), stop (Agent.run).

Build order follows who needs whom: the wake-up path and the runtime cache exist before
everything that wakes pods, and each part gets what it needs when it is made (no callbacks
patched in later). Stopping the agent (SIGTERM, or any of its loops dying) never stops a pod:
containers keep running under containerd, and the next agent adopts them from their CRI labels.

A little over 250 lines: this is the one place that knows every part of the agent, and the
wiring reads best in one file, top to bottom, in the order the parts are made.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

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
from pykubelet.pods.history import PodHistory
from pykubelet.pods.history_records import runtime_cni_chain
from pykubelet.pods.housekeeping import housekeeping
from pykubelet.pods.sync import PodSyncer
from pykubelet.pods.sync_parts import build_sync_parts
from pykubelet.pods.wakeups import Wakeups
from pykubelet.pods.worker import WorkerDeps
from pykubelet.probes.manager import ProbeManager
from pykubelet.runtime.dns import ClusterDNS
from pykubelet.runtime.images import ImageManager
from pykubelet.runtime.cgroups import kubepods_under
from pykubelet.runtime.data_dirs import setup_data_dirs
from pykubelet.runtime.specs import NodeFacts
from pykubelet.server import local
from pykubelet.server.stats import IMAGEFS_DIR
from pykubelet.sources.static_files import StaticPodSource
from pykubelet.status.manager import StatusManager
from pykubelet.util.backoff import Backoff
from pykubelet.util.durations import format_duration
from pykubelet.util.fdlimit import raise_open_files_limit
from pykubelet.util.hostip import default_route_ip
from pykubelet.util.log import get_logger
from pykubelet.util.unix_http import agent_socket
from pykubelet.util.sd_notify import Notifier, WatchdogError
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
    """What phase build made, for phases start and stop."""

    cri: CRIClient
    kube: Any = None  # KubeClient, imported only when joining a cluster
    heartbeat: Any = None  # its sibling for the Lease and node status (no rate limit, own connections)
    rotation: Any = None  # kube.rotation.ClientCertificateRotation, with rotateCertificates
    node_ip: str = ""
    wakeups: Wakeups = field(default_factory=Wakeups)
    cache: RuntimeCache = field(default_factory=RuntimeCache)
    recorder: EventRecorder | None = None
    pleg: RelistPLEG | None = None
    network: NetworkManager | None = None
    node: Any = None  # node.manager.NodeManager, when the agent registers its Node
    mirrors: Any = None  # pods.mirror.MirrorPods, likewise
    statuses: StatusManager | None = None
    api_clients: Any = None  # volumes.api.ApiClients, when joining a cluster
    dispatcher: PodDispatcher | None = None
    static_source: StaticPodSource | None = None
    api_source: Any = None  # sources.apiserver.ApiserverPodSource, when joining a cluster
    history: PodHistory | None = None  # every pod's steps, for `pykubelet explain` (/debug, server/local.py)
    health: dict[str, Callable[[], bool]] = field(default_factory=dict)
    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)  # run in reverse


class Agent:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.ready = asyncio.Event()
        self.tasks = Tasks()

    async def run(self) -> None:
        s = self.settings
        raise_open_files_limit()
        try:
            systemd = Notifier()
        except WatchdogError as e:
            raise LoopDied(str(e)) from None
        parts = Parts(CRIClient(s.runtime.endpoint, s.runtime.image_endpoint, slow_timeout=s.runtime.request_timeout))
        try:
            await self._build(parts)
            await self._start(parts)
            self.tasks.once("systemd-notify", self._notify_systemd(parts, systemd))
            self.ready.set()
            raise await self.tasks.first_death()  # phase wait
        finally:
            systemd.stopping("stopping; pods keep running")
            await self._stop(parts)

    async def _notify_systemd(self, p: Parts, systemd: Notifier) -> None:
        """READY=1 once the agent serves and has synced: its servers listen (phase start), the
        runtime has been listed and the static pods read. Not the apiserver's pods: under
        kubeadm init the apiserver is one of this node's static pods. Then the watchdog, if set."""
        assert p.pleg is not None
        await p.pleg.relisted.wait()
        if p.static_source is not None:
            await p.static_source.ready.wait()
        systemd.ready(f"serving; {len(p.dispatcher.workers) if p.dispatcher else 0} pods")
        if systemd.enabled:
            log.info("Told systemd the agent is ready", watchdog_seconds=systemd.watchdog_seconds)
        if systemd.watchdog_seconds:
            await systemd.watchdog(lambda: all(check() for check in p.health.values()))

    async def _build(self, p: Parts) -> None:
        """Phase build: connect, then make every part in dependency order; nothing runs yet."""
        s = self.settings
        if s.cluster.kubeconfig:
            await self._connect_to_cluster(p)
        runtime = await wait_for_runtime(p.cri)
        log.info("Connected to the container runtime", endpoint=s.runtime.endpoint, runtime=runtime,
                 node=s.node_name, apiserver=p.kube.host if p.kube else "none (standalone)")
        await self._check_cgroup_driver(p.cri)
        p.node_ip = s.cluster.node_ip or await default_route_ip()
        setup_data_dirs(s.root_dir, s.pods.pod_logs_dir)  # 0750, before anything is written below them
        host_info = read_host_info(s.root_dir)
        allocatable = Allocatable(pods=s.pods.max_pods, cpu_millis=host_info.cpus * 1000,
                                  memory_bytes=allocatable_memory_bytes(host_info, s.cluster.eviction_hard))
        # The wake-up path and the runtime cache (made with Parts) come first: everything below wakes pods.
        p.recorder = EventRecorder(p.kube, s.node_name)
        p.pleg = RelistPLEG(p.cri, p.cache, p.wakeups.wake, time.time, s.root_dir)
        p.network = NetworkManager(s.network, p.cri, s.root_dir, s.node_name, p.kube)
        p.health = {"pleg": p.pleg.healthy, "syncloop": self.tasks.alive}
        if p.kube is not None and s.cluster.register_node:
            from pykubelet.pods.mirror import MirrorPods

            node = p.node = self._node_manager(p, host_info)
            p.mirrors = MirrorPods(p.kube, s.node_name, lambda: node.node_uid, p.wakeups.wake)
        p.statuses = StatusManager(p.kube, p.mirrors)
        if p.kube is not None:
            from pykubelet.kube.objects import ObjectCache, ServiceCache
            from pykubelet.kube.tokens import TokenManager
            from pykubelet.volumes.api import ApiClients

            # A changed ConfigMap or Secret wakes the pods that read it.
            p.api_clients = ApiClients(ObjectCache(p.kube, p.wakeups.wake), TokenManager(p.kube), ServiceCache(p.kube))
        node_facts = NodeFacts(
            node_name=s.node_name, host_ip=p.node_ip, memory_capacity=host_info.memory_bytes,
            allocatable={"cpu": float(host_info.cpus), "memory": float(allocatable.memory_bytes)},
            dns=ClusterDNS(tuple(s.cluster.cluster_dns), s.cluster.cluster_domain, s.cluster.resolv_conf),
            root_dir=s.root_dir, seccomp_root=os.path.join(s.root_dir, "seccomp"), pod_logs_dir=s.pods.pod_logs_dir,
            cgroup_driver=s.runtime.cgroup_driver, kubepods=kubepods_under(s.pods.cgroup_root))
        history = p.history = PodHistory(cni_chain=lambda: runtime_cni_chain(s.network.cni_conf_dir))
        syncer = PodSyncer(build_sync_parts(p.cri, ImageManager(p.cri, Backoff()), p.recorder, history, node_facts,
                                            p.api_clients))
        deps = WorkerDeps(cache=p.cache, syncer=syncer, statuses=p.statuses, recorder=p.recorder,
                          probes=ProbeManager(p.cri, p.recorder, p.wakeups.wake, observe=history.probe),
                          wakeups=p.wakeups,
                          host_ip=p.node_ip, resync_seconds=s.pods.sync_frequency, mirrors=p.mirrors)
        dispatcher = p.dispatcher = PodDispatcher(deps, s.node_name, allocatable,
                                                  SysctlAllowlist.build(s.pods.allowed_unsafe_sysctls))
        # The pod sources, last: they hand their pods to the dispatcher.
        if s.pods.static_pod_path:
            p.static_source = StaticPodSource(s.pods.static_pod_path, s.node_name, s.pods.file_check_frequency,
                                              lambda pods: dispatcher.set_pods(pods, "file"))
        if p.kube is not None:
            from pykubelet.sources.apiserver import ApiserverPodSource

            mirrors = p.mirrors

            def on_api_pods(pods) -> None:
                if mirrors is not None:
                    mirrors.update(pod for pod in pods if pod.is_mirror)
                dispatcher.set_pods((pod for pod in pods if not pod.is_mirror), "api")

            p.api_source = ApiserverPodSource(p.kube, s.node_name, on_api_pods)

    async def _connect_to_cluster(self, p: Parts) -> None:
        """The node's identity (TLS bootstrap if it has none yet), then its apiserver client."""
        from pykubelet.kube import bootstrap  # costs ~40 MB: only when joining a cluster
        from pykubelet.kube.client import KubeClient

        s, user_agent = self.settings, f"pykubelet/{KUBELET_VERSION}"
        try:
            credentials = await bootstrap.node_credentials(s.cluster, s.node_name, user_agent)
        except bootstrap.BootstrapError as e:
            raise LoopDied(str(e)) from None
        p.kube = await KubeClient.from_kubeconfig(credentials.kubeconfig, s.cluster.api_qps, s.cluster.api_burst,
                                                  user_agent=user_agent, client_pem=credentials.client_pem)
        # The kubelet's heartbeat timeout: the status period, at most the lease duration.
        p.heartbeat = await p.kube.heartbeat_client(min(s.cluster.status_update_seconds,
                                                        float(s.cluster.lease_duration_seconds)))
        if credentials.rotate:
            from pykubelet.kube.certstore import CertStore
            from pykubelet.kube.rotation import ClientCertificateRotation

            p.rotation = ClientCertificateRotation(p.kube, CertStore(s.cluster.cert_dir), s.node_name)

    async def _check_cgroup_driver(self, cri: CRIClient) -> None:
        """Refuse to start when our cgroup driver is not the runtime's (runtime/cgroup_driver.py)."""
        from pykubelet.runtime import cgroup_driver

        try:
            reported = await cri.runtime_cgroup_driver()
            info = {} if reported is not None else dict((await cri.status(verbose=True)).info)
        except errors.CRIError as e:
            log.warning("Could not ask the runtime for its cgroup driver; trusting cgroupDriver", err=str(e))
            reported, info = None, {}
        theirs, source = cgroup_driver.runtime_driver(reported, info)
        problem = cgroup_driver.mismatch(self.settings.runtime.cgroup_driver, theirs, source)
        if problem:
            raise LoopDied(problem)

    async def _start(self, p: Parts) -> None:
        """Phase start: the kubelet API listens (before the Node registers), then every loop runs."""
        s, tasks = self.settings, self.tasks
        assert p.pleg and p.network and p.statuses and p.recorder and p.dispatcher
        if s.server.port:
            await self._serve_kubelet_api(p)
        sources_ready: list[asyncio.Event] = []
        if p.static_source is not None:
            sources_ready.append(p.static_source.ready)
            tasks.loop("static-pod-source", p.static_source.run())
        tasks.loop("network", p.network.run())
        if p.rotation is not None:
            tasks.loop("client-certificate-rotation", p.rotation.run())
        if p.api_clients is not None:
            tasks.loop("service-watch", p.api_clients.services.run())
        if p.node is not None:
            tasks.loop("node-status", p.node.run())
            # Ready may turn True now, not at the next status period.
            tasks.once("network-ready-report", after(p.network.ready, p.node.nudge))
            # Mirror pods need the Node's UID as their owner: sync the static pods again.
            tasks.once("mirror-pods", after(p.node.registered, p.wakeups.wake_all))
        if p.api_source is not None:
            sources_ready.append(p.api_source.ready)
            tasks.loop("apiserver-pod-source", p.api_source.run())
            tasks.loop("status-manager", p.statuses.run())
            tasks.loop("events", p.recorder.run())
        tasks.loop("pleg", p.pleg.run())
        tasks.loop("housekeeping", housekeeping(p.dispatcher, p.cache, p.pleg.relisted, sources_ready, s.root_dir,
                                                kubepods_under(s.pods.cgroup_root)))
        if s.server.healthz_port:
            p.closers.append(await local.serve_healthz(local.build_healthz_app(p.health),
                                                       s.server.healthz_bind_address, s.server.healthz_port))
        try:
            p.closers.append(await local.serve_socket(local.build_debug_app(p.statuses, self._debug(p)),
                                                      agent_socket(s.root_dir)))
        except OSError as e:
            raise LoopDied(f"cannot serve /pods and /debug on {agent_socket(s.root_dir)}: {e}") from None

    async def _serve_kubelet_api(self, p: Parts) -> None:
        from pykubelet.server import kubelet_api
        from pykubelet.server.host import Host

        assert p.statuses is not None
        s, kube = self.settings, p.kube
        review = (lambda path, body: kube.create(path, body)) if kube is not None else None
        context = None
        if s.server.server_tls_bootstrap:
            from pykubelet.node.status import addresses

            context, rotation = await kubelet_api.tls.bootstrapped_serving(
                s, kube, lambda: addresses(p.node_ip, s.node_name))
            self.tasks.loop("serving-certificate-rotation", rotation.run())
        try:
            server = await kubelet_api.start(Host(self.settings, p.cri, [p.node_ip], p.statuses.pods, p.health,
                                                  review), context)
        except (kubelet_api.BindError, kubelet_api.tls.TLSError) as e:
            raise LoopDied(str(e)) from None
        p.closers.append(server.close)

    def _debug(self, p: Parts) -> local.Debug:
        """What /debug serves: the pods' step history, and the agent's own state for `pykubelet doctor`."""
        s, history, pleg, network, node, dispatcher = (self.settings, p.history, p.pleg, p.network, p.node,
                                                       p.dispatcher)
        assert history is not None and pleg is not None and network is not None and dispatcher is not None
        started = time.time()

        def agent() -> dict[str, Any]:
            loops = {name: {"alive": not task.done(), "error": "" if not task.done() or task.cancelled()
                            else repr(task.exception())} for name, task in self.tasks.loops.items()}
            return {"pid": os.getpid(), "started_at": started, "version": KUBELET_VERSION, "node": s.node_name,
                    "settings": local.settings_json(s), "loops": loops, "last_sync": history.last_sync,
                    "pods": len(dispatcher.workers),
                    "pleg": {"last_relist": pleg.last_relist, "healthy": pleg.healthy(),
                             "threshold_seconds": HEALTHY_WITHIN_SECONDS},
                    "network": {"mode": s.network.mode, "ready": network.ready.is_set(), "problem": network.problem,
                                "pod_cidr": network.pod_cidr},
                    "node_registered": node.registered.is_set() if node is not None else None}
        return local.Debug(history=history.snapshot, histories=history.pods, agent=agent)

    def _node_manager(self, p: Parts, host_info: HostInfo):
        from pykubelet.node.manager import NodeManager

        s, pleg, network = self.settings, p.pleg, p.network
        assert pleg is not None and network is not None and p.recorder is not None

        def agent_errors() -> list[str]:
            errs = [f"network plugin is not ready: {network.problem}"] if network.problem else []
            if pleg.healthy():
                return errs
            seen = time.time() - pleg.last_relist if pleg.last_relist else HEALTHY_WITHIN_SECONDS
            return [f"PLEG is not healthy: pleg was last seen active {format_duration(seen)} ago; "
                    f"threshold is {format_duration(HEALTHY_WITHIN_SECONDS)}", *errs]

        return NodeManager(p.kube, p.cri, p.recorder, node_name=s.node_name, host_info=host_info, node_ip=p.node_ip,
                           labels=s.cluster.node_labels, max_pods=s.pods.max_pods,
                           thresholds=s.cluster.eviction_hard, root_dir=s.root_dir, imagefs_dir=IMAGEFS_DIR,
                           kubelet_version=KUBELET_VERSION, update_seconds=s.cluster.status_update_seconds,
                           report_seconds=s.cluster.status_report_seconds,
                           lease_seconds=s.cluster.lease_duration_seconds, agent_errors=agent_errors,
                           kubelet_port=s.server.port, taints=s.cluster.register_with_taints,
                           provider_id=s.cluster.provider_id, heartbeat=p.heartbeat)

    async def _stop(self, p: Parts) -> None:
        """Phase stop: the loops, the workers (never their pods), then every connection."""
        await self.tasks.stop()
        if p.dispatcher is not None:
            await p.dispatcher.stop()
        if p.api_clients is not None:
            await p.api_clients.objects.close()
        for close in reversed(p.closers):
            await close()
        if p.kube is not None:
            await p.kube.close()
        await p.cri.close()
