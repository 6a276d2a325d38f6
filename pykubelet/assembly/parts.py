"""Phase build: from the settings to every part of the agent, connected and made in dependency
order; nothing runs yet (agent.py starts, waits and stops what `build` returns).

The cluster-only parts are imported only when the node joins a cluster (the apiserver client
costs ~40 MB); they are typed here through TYPE_CHECKING imports.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Mapping


from pykubelet import KUBELET_VERSION
from pykubelet.api.pod import Pod
from pykubelet.api.sysctls import SysctlAllowlist
from pykubelet.assembly.eviction_part import build_eviction
from pykubelet.assembly.node_lifecycle_part import build_shutdown, node_swap
from pykubelet.assembly.pod_path import PodPath, PodPathSettings, WakePath, build_pod_path, build_wake_path
from pykubelet.assembly.runtime_checks import check_cgroup_driver, wait_for_runtime
from pykubelet.config import Settings
from pykubelet.cri.client import CRIClient
from pykubelet.network.manager import NetworkManager
from pykubelet.node.eviction import EvictionManager
from pykubelet.node.hostinfo import HostInfo, read_host_info
from pykubelet.node.shutdown import NodeShutdownManager
from pykubelet.node.status import allocatable_memory_bytes
from pykubelet.pleg.relist import HEALTHY_WITHIN_SECONDS
from pykubelet.pods.admission import Allocatable
from pykubelet.pods.history_records import runtime_cni_chain
from pykubelet.pods.housekeeping import housekeeping
from pykubelet.runtime.cgroups import kubepods_under
from pykubelet.runtime.credentials import plugin_config
from pykubelet.runtime.credentials.plugins import CredentialPlugins, plugins_from
from pykubelet.runtime.data_dirs import setup_data_dirs
from pykubelet.runtime.dns import ClusterDNS
from pykubelet.runtime.image_gc import ImageGC, build_image_gc
from pykubelet.runtime.log_rotation import ContainerLogManager
from pykubelet.runtime.specs import NodeFacts
from pykubelet.sources.static_files import StaticPodSource
from pykubelet.util import heap
from pykubelet.util.durations import format_duration
from pykubelet.util.hostip import default_route_ip
from pykubelet.util.log import get_logger
from pykubelet.util.tasks import LoopDied, Tasks, after

if TYPE_CHECKING:  # joining a cluster only
    from pykubelet.kube.client import KubeClient
    from pykubelet.kube.rotation import ClientCertificateRotation
    from pykubelet.node.manager import NodeManager
    from pykubelet.pods.mirror import MirrorPods
    from pykubelet.sources.apiserver import ApiserverPodSource
    from pykubelet.volumes.api import ApiClients

log = get_logger(__name__)


@dataclass(frozen=True)
class Cluster:
    """The node's connections to its apiserver."""

    kube: KubeClient
    heartbeat: KubeClient  # for the Lease and node status: no rate limit, its own connections
    rotation: ClientCertificateRotation | None  # rotateCertificates: the client certificate renewed

    async def close(self) -> None:
        await self.kube.close()  # and the heartbeat client, made from it


@dataclass(frozen=True)
class Parts:
    """Everything phase build made, for phases start and stop."""

    cri: CRIClient  # the agent's: made before phase build, closed after phase stop
    node_ip: str
    pods: PodPath
    network: NetworkManager
    health: Mapping[str, Callable[[], bool]]  # /healthz and the systemd watchdog
    static_source: StaticPodSource | None
    cluster: Cluster | None = None
    node: NodeManager | None = None  # when the agent registers its Node
    mirrors: MirrorPods | None = None  # likewise
    api_clients: ApiClients | None = None  # ConfigMaps, Secrets, tokens, Services
    api_source: ApiserverPodSource | None = None
    image_gc: ImageGC | None = None  # None when the settings leave nothing for it to do
    eviction: EvictionManager | None = None  # None without eviction thresholds
    shutdown: NodeShutdownManager | None = None  # None without shutdownGracePeriod

    @property
    def kube(self) -> KubeClient | None:
        return self.cluster.kube if self.cluster is not None else None

    def start(self, tasks: Tasks, s: Settings) -> None:
        """Phase start's loops. The servers are the agent's (it opens them first and closes them)."""
        sources_ready: list[asyncio.Event] = []
        if self.static_source is not None:
            sources_ready.append(self.static_source.ready)
            tasks.loop("static-pod-source", self.static_source.run())
        tasks.loop("network", self.network.run())
        if self.cluster is not None and self.cluster.rotation is not None:
            tasks.loop("client-certificate-rotation", self.cluster.rotation.run())
        if self.api_clients is not None:
            tasks.loop("service-watch", self.api_clients.services.run())
            if self.api_clients.csi is not None:
                tasks.loop("csi-plugin-registration", self.api_clients.csi.watcher.run())
                tasks.loop("csi-republish", self.pods.deps.syncer.api_volumes.claims.csi_pods.run_republish(
                    self.pods.wake.recorder))
        if self.node is not None:
            tasks.loop("node-status", self.node.run())
            # Ready may turn True now, not at the next status period.
            tasks.once("network-ready-report", after(self.network.ready, self.node.nudge))
            # Mirror pods need the Node's UID as their owner: sync the static pods again.
            tasks.once("mirror-pods", after(self.node.registered, self.pods.wake.wakeups.wake_all))
        if self.api_source is not None:
            sources_ready.append(self.api_source.ready)
            tasks.loop("apiserver-pod-source", self.api_source.run())
            tasks.loop("events", self.pods.wake.recorder.run())
        self.pods.start(tasks)
        if self.image_gc is not None:
            tasks.loop("image-gc", self.image_gc.run())
        if self.eviction is not None:
            tasks.loop("eviction-manager", self.eviction.run())
        if self.shutdown is not None:
            tasks.once("node-shutdown-manager", self.shutdown.run())
        log_rotation = ContainerLogManager(self.cri, s.container_logs, s.pods.pod_logs_dir)
        if log_rotation.enabled:
            tasks.loop("container-log-rotation", log_rotation.run())
        tasks.loop("heap-trim", heap.give_back_free_memory())  # RSS falls back after a burst of pods
        tasks.loop("housekeeping", housekeeping(self.pods.dispatcher, self.pods.wake.cache,
                                                self.pods.wake.pleg.relisted, sources_ready, s.root_dir,
                                                kubepods_under(s.pods.cgroup_root), s.pods.pod_logs_dir,
                                                self.pods.deps.syncer.api_volumes.claims.csi_pods.clean_up))

    async def stop(self) -> None:
        """After the loops (Tasks.stop): the workers and probes (never their pods), then the connections."""
        await self.pods.stop()
        await self.pods.deps.syncer.api_volumes.claims.csi_pods.stop()  # driver calls housekeeping started
        if self.api_clients is not None:
            await self.api_clients.objects.close()
        if self.cluster is not None:
            await self.cluster.close()


async def build(s: Settings, cri: CRIClient, syncloop_alive: Callable[[], bool]) -> Parts:
    """Connect, then make every part in dependency order. What it opened is closed if it fails."""
    cluster = await connect_to_cluster(s) if s.cluster.kubeconfig else None
    try:
        return await _build(s, cri, cluster, syncloop_alive)
    except BaseException:
        if cluster is not None:
            await cluster.close()
        raise


async def _build(s: Settings, cri: CRIClient, cluster: Cluster | None, syncloop_alive: Callable[[], bool]) -> Parts:
    kube = cluster.kube if cluster is not None else None
    runtime = await wait_for_runtime(cri)
    log.info("Connected to the container runtime", endpoint=s.runtime.endpoint, runtime=runtime,
             node=s.node_name, apiserver=kube.host if kube is not None else "none (standalone)")
    await check_cgroup_driver(s, cri)
    node_ip = s.cluster.node_ip or await default_route_ip()
    setup_data_dirs(s.root_dir, s.pods.pod_logs_dir)  # 0750, before anything is written below them
    host_info = read_host_info(s.root_dir)
    allocatable = Allocatable(pods=s.pods.max_pods, cpu_millis=host_info.cpus * 1000,
                              memory_bytes=allocatable_memory_bytes(host_info, s.cluster.eviction_hard))
    facts = NodeFacts(
        node_name=s.node_name, host_ip=node_ip, memory_capacity=host_info.memory_bytes,
        allocatable={"cpu": float(host_info.cpus), "memory": float(allocatable.memory_bytes)},
        dns=ClusterDNS(tuple(s.cluster.cluster_dns), s.cluster.cluster_domain, s.cluster.resolv_conf),
        root_dir=s.root_dir, seccomp_root=os.path.join(s.root_dir, "seccomp"), pod_logs_dir=s.pods.pod_logs_dir,
        cgroup_driver=s.runtime.cgroup_driver, kubepods=kubepods_under(s.pods.cgroup_root),
        swap=await node_swap(s, host_info.memory_bytes))
    wake = build_wake_path(cri, facts, kube)  # first: everything below wakes pods
    network = NetworkManager(s.network, cri, s.root_dir, s.node_name, kube, recorder=wake.recorder)
    health = {"pleg": wake.pleg.healthy, "syncloop": syncloop_alive}
    node = mirrors = api_clients = None
    image_gc = build_image_gc(cri, s.image_gc, wake.recorder, s.node_name)
    # Made before the pod path, whose admission asks for its conditions; it evicts through the pod path.
    eviction = build_eviction(s, cri, node_ip, wake.recorder, image_gc, lambda: pods.dispatcher,
                              lambda: pods.statuses, lambda: node.nudge() if node is not None else None)
    shutdown = build_shutdown(s, wake.recorder, lambda: pods.dispatcher, lambda: pods.statuses,
                              lambda: node.nudge() if node is not None else None)
    if kube is not None and s.cluster.register_node:
        from pykubelet.pods.mirror import MirrorPods

        assert cluster is not None
        node = registered = node_manager(s, cri, cluster, wake, network, host_info, node_ip, eviction, shutdown)
        # Mirror pods are owned by the Node: its UID is known once it registered.
        mirrors = MirrorPods(kube, s.node_name, lambda: registered.node_uid, wake.wakeups.wake)
    if kube is not None:
        from pykubelet.kube.objects import ObjectCache, ServiceCache
        from pykubelet.kube.tokens import TokenManager
        from pykubelet.volumes.api import ApiClients
        from pykubelet.volumes.csi.node import build_csi_node

        # A changed ConfigMap or Secret wakes the pods that read it.
        tokens = TokenManager(kube)
        api_clients = ApiClients(ObjectCache(kube, wake.wakeups.wake), tokens, ServiceCache(kube),
                                 build_csi_node(s.root_dir, s.node_name, kube, tokens))
    pods = build_pod_path(wake, cri, PodPathSettings(
        facts, allocatable, s.pods.sync_frequency, SysctlAllowlist.build(s.pods.allowed_unsafe_sysctls),
        cni_chain=lambda: runtime_cni_chain(s.network.cni_conf_dir),
        credential_plugins=await credential_plugins(s),
        pressure=(lambda: eviction.conditions) if eviction is not None else tuple,
        shutting_down=(lambda: shutdown.shutting_down) if shutdown is not None else (lambda: False)),
        kube=kube, mirrors=mirrors, api_clients=api_clients)
    # What earlier runs left published, known before any pod syncs (the kubelet's reconstruction).
    await pods.deps.syncer.api_volumes.claims.csi_pods.reconstruct()
    # The pod sources, last: they hand their pods to the dispatcher.
    dispatcher = pods.dispatcher
    static_source = api_source = None
    if s.pods.static_pod_path:
        static_source = StaticPodSource(s.pods.static_pod_path, s.node_name, s.pods.file_check_frequency,
                                        lambda found: dispatcher.set_pods(found, "file"))
    if kube is not None:
        from pykubelet.sources.apiserver import ApiserverPodSource

        def on_api_pods(listed: list[Pod]) -> None:
            if mirrors is not None:
                mirrors.update(pod for pod in listed if pod.is_mirror)
            dispatcher.set_pods((pod for pod in listed if not pod.is_mirror), "api")

        api_source = ApiserverPodSource(kube, s.node_name, on_api_pods)
    return Parts(cri, node_ip, pods, network, health, static_source, cluster, node, mirrors, api_clients,
                 api_source, image_gc, eviction, shutdown)


async def connect_to_cluster(s: Settings) -> Cluster:
    """The node's identity (TLS bootstrap if it has none yet), then its apiserver clients."""
    from pykubelet.kube import bootstrap  # costs ~40 MB: only when joining a cluster
    from pykubelet.kube.client import KubeClient

    user_agent = f"pykubelet/{KUBELET_VERSION}"
    try:
        credentials = await bootstrap.node_credentials(s.cluster, s.node_name, user_agent)
    except bootstrap.BootstrapError as e:
        raise LoopDied(str(e)) from None
    kube = await KubeClient.from_kubeconfig(credentials.kubeconfig, s.cluster.api_qps, s.cluster.api_burst,
                                            user_agent=user_agent, client_pem=credentials.client_pem)
    try:
        # The kubelet's heartbeat timeout: the status period, at most the lease duration.
        heartbeat = await kube.heartbeat_client(min(s.cluster.status_update_seconds,
                                                    float(s.cluster.lease_duration_seconds)))
    except BaseException:
        await kube.close()
        raise
    rotation = None
    if credentials.rotate:
        from pykubelet.kube.certstore import CertStore
        from pykubelet.kube.rotation import ClientCertificateRotation

        rotation = ClientCertificateRotation(kube, CertStore(s.certificate_dir()), s.node_name)
    return Cluster(kube, heartbeat, rotation)


async def credential_plugins(s: Settings) -> CredentialPlugins | None:
    """The exec credential providers of --image-credential-provider-config; a configuration that
    cannot be used stops the start, as it stops the kubelet's."""
    config = s.runtime.image_credential_provider_config
    if not config:
        return None
    bin_dir = s.runtime.image_credential_provider_bin_dir
    try:
        specs = await asyncio.to_thread(plugin_config.load, config, bin_dir)
    except plugin_config.CredentialProviderConfigError as e:
        raise LoopDied(f"Failed to register CRI auth plugins: {e}") from None
    log.info("Registered credential provider plugins", providers=[spec.name for spec in specs])
    return plugins_from(specs, bin_dir)


def node_manager(s: Settings, cri: CRIClient, cluster: Cluster, wake: WakePath, network: NetworkManager,
                 host_info: HostInfo, node_ip: str, eviction: EvictionManager | None,
                 shutdown: NodeShutdownManager | None = None) -> NodeManager:
    from pykubelet.node.manager import NodeManager

    pleg = wake.pleg

    def agent_errors() -> list[str]:
        errs = [f"network plugin is not ready: {network.problem}"] if network.problem else []
        errs += shutdown.errors() if shutdown is not None else []  # the kubelet lists it last
        if pleg.healthy():
            return errs
        seen = time.time() - pleg.last_relist if pleg.last_relist else HEALTHY_WITHIN_SECONDS
        return [f"PLEG is not healthy: pleg was last seen active {format_duration(seen)} ago; "
                f"threshold is {format_duration(HEALTHY_WITHIN_SECONDS)}", *errs]

    return NodeManager(cluster.kube, cri, wake.recorder, node_name=s.node_name, host_info=host_info, node_ip=node_ip,
                       labels=s.cluster.node_labels, max_pods=s.pods.max_pods,
                       thresholds=s.cluster.eviction_hard,
                       kubelet_version=KUBELET_VERSION, update_seconds=s.cluster.status_update_seconds,
                       report_seconds=s.cluster.status_report_seconds,
                       lease_seconds=s.cluster.lease_duration_seconds, agent_errors=agent_errors,
                       kubelet_port=s.server.port, taints=s.cluster.register_with_taints,
                       provider_id=s.cluster.provider_id, heartbeat=cluster.heartbeat,
                       **({"pressure": eviction.pressure} if eviction is not None else {}))
