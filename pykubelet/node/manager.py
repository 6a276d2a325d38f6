"""The node's life in the cluster: register the Node, heartbeat its Lease, report its status.

Status is computed every nodeStatusUpdateFrequency and written when it changed, and at least
every nodeStatusReportFrequency; until the node is first Ready, for the kubelet's two-minute
grace period after start, it is checked every 100 ms and written the moment it would turn Ready
(the kubelet's fast status update: kubeadm and a CNI DaemonSet's rollout wait on that first
Ready). The Lease is renewed every quarter of its duration. An
unreachable apiserver costs heartbeats, never pods.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

from pykubelet.cri import errors as cri_errors
from pykubelet.cri.client import CRIClient
from pykubelet.kube import errors
from pykubelet.kube.client import STRATEGIC_MERGE_PATCH, KubeClient
from pykubelet.api.times import micro_time, now_rfc3339
from pykubelet.kube.events import NORMAL, EventRecorder, node_ref
from pykubelet.node import status as node_status
from pykubelet.node.hostinfo import HostInfo
from pykubelet.node.pressure import Pressure, Threshold
from pykubelet.util.log import get_logger
from pykubelet.util.timeouts import within

log = get_logger(__name__)

LEASE_NAMESPACE = "kube-node-lease"
RUNTIME_CHECK_TIMEOUT = 5.0
REGISTER_RETRY_MAX = 7.0  # the kubelet's registration back-off tops out at 7 s
NODE_READY_GRACE = 120.0  # the kubelet's nodeReadyGracePeriod: how long after start it looks fast
FAST_CHECK_SECONDS = 0.1


class NodeManager:
    def __init__(self, kube: KubeClient, cri: CRIClient, recorder: EventRecorder, *, node_name: str,
                 host_info: HostInfo, node_ip: str, labels: dict[str, str], max_pods: int,
                 thresholds: dict[str, Threshold], kubelet_version: str,
                 update_seconds: float, report_seconds: float, lease_seconds: int,
                 agent_errors: Callable[[], list[str]], kubelet_port: int = node_status.KUBELET_PORT,
                 taints: list[dict[str, str]] | None = None, provider_id: str = "",
                 heartbeat: KubeClient | None = None, pressure: Callable[[], Pressure] = Pressure):
        """heartbeat: the client for Lease renewals and status updates (KubeClient.heartbeat_client),
        so that they never wait behind the agent's other requests; kube by default. pressure: the
        eviction manager's conditions now."""
        self.kube = kube
        self.heartbeat = heartbeat or kube
        self.cri = cri
        self.recorder = recorder
        self.node_name = node_name
        self.host_info = host_info
        self.node_ip = node_ip
        self.labels = labels
        self.max_pods = max_pods
        self.thresholds = thresholds
        self.pressure = pressure
        self.kubelet_version = kubelet_version
        self.update_seconds = update_seconds
        self.report_seconds = report_seconds
        self.lease_seconds = lease_seconds
        self.agent_errors = agent_errors
        self.kubelet_port = kubelet_port
        self.taints = taints or []  # registerWithTaints: set when the Node is created, never reconciled
        self.provider_id = provider_id
        self.node_uid = ""
        self.pod_cidrs: list[str] = []
        self.registered = asyncio.Event()
        self._nudged = asyncio.Event()
        self._runtime_version = ""
        self._last_status: dict[str, Any] = {}
        self._last_report = 0.0
        self._started = time.monotonic()
        self._reported_ready = False

    @property
    def path(self) -> str:
        return f"/api/v1/nodes/{self.node_name}"

    async def run(self) -> None:
        self._started = time.monotonic()
        await self._register()
        await asyncio.gather(self._lease_loop(), self._status_loop())

    # --- registration
    def _initial_node(self) -> dict[str, Any]:
        return {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {
                "name": self.node_name,
                "labels": node_status.node_labels(self.node_name, self.host_info.architecture, self.labels),
                "annotations": {"volumes.kubernetes.io/controller-managed-attach-detach": "true"},
            },
            "spec": {**({"taints": self.taints} if self.taints else {}),
                     **({"providerID": self.provider_id} if self.provider_id else {})},
        }

    async def _register(self) -> None:
        delay = 0.1
        while True:
            try:
                node = await self._create_or_reconcile()
                break
            except errors.KubeError as e:
                log.warning("Unable to register node with the apiserver; retrying", node=self.node_name,
                            err=str(e), retryIn=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, REGISTER_RETRY_MAX)
        self.node_uid = node["metadata"]["uid"]
        self.pod_cidrs = node["spec"].get("podCIDRs") or []
        self.registered.set()
        log.info("Node registered", node=self.node_name, uid=self.node_uid)
        self.recorder.record(node_ref(self.node_name), NORMAL, "Starting", "Starting kubelet.")

    async def _create_or_reconcile(self) -> dict[str, Any]:
        try:
            return await self.kube.create("/api/v1/nodes", self._initial_node())
        except errors.Conflict:
            pass
        existing = await self.kube.get(self.path)
        wanted = self._initial_node()["metadata"]
        labels = existing["metadata"].get("labels") or {}
        missing = {k: v for k, v in wanted["labels"].items() if labels.get(k) != v}
        if missing:
            log.info("Reconciling labels of the existing Node", node=self.node_name, labels=",".join(missing))
            return await self.kube.patch(self.path, {"metadata": {"labels": missing}})
        return existing

    # --- lease
    async def _lease_loop(self) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{self.node_name}"
        interval = self.lease_seconds / 4  # 40 s lease: renewed every 10 s, as the kubelet does
        lease: dict[str, Any] | None = None
        while True:
            try:
                lease = await self._renew(path, lease)
            except errors.KubeError as e:
                log.warning("Failed to renew the node lease", node=self.node_name, err=str(e))
                lease = None
            await asyncio.sleep(interval)

    async def _renew(self, path: str, lease: dict[str, Any] | None) -> dict[str, Any]:
        if lease is None:
            try:
                lease = await self.heartbeat.get(path)
            except errors.NotFound:
                return await self.heartbeat.create(path.rsplit("/", 1)[0], self._lease_object())
        lease["spec"].update(holderIdentity=self.node_name, leaseDurationSeconds=self.lease_seconds,
                             renewTime=micro_time())
        lease["metadata"]["ownerReferences"] = self._owner()
        try:
            return await self.heartbeat.replace(path, lease)
        except errors.Conflict:
            return await self._renew(path, None)

    def _owner(self) -> list[dict[str, Any]]:
        return [{"apiVersion": "v1", "kind": "Node", "name": self.node_name, "uid": self.node_uid}]

    def _lease_object(self) -> dict[str, Any]:
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.node_name, "namespace": LEASE_NAMESPACE,
                             "ownerReferences": self._owner()},
                "spec": {"holderIdentity": self.node_name, "leaseDurationSeconds": self.lease_seconds,
                         "renewTime": micro_time()}}

    # --- status
    async def observe_health(self) -> node_status.NodeHealth:
        health = node_status.NodeHealth()
        try:
            answer = await within(self.cri.status(), RUNTIME_CHECK_TIMEOUT)
            if not self._runtime_version:
                version = await self.cri.version()
                self._runtime_version = f"{version.runtime_name}://{version.runtime_version}"
            node_status.observe_runtime_conditions(health, answer.status.conditions)
        except (cri_errors.CRIError, asyncio.TimeoutError):
            health.runtime_errors.append("container runtime is down")
        health.runtime_errors.extend(self.agent_errors())
        health.pressure = self.pressure()
        return health

    def build_status(self, health: node_status.NodeHealth) -> dict[str, Any]:
        capacity, allocatable = node_status.capacity_and_allocatable(self.host_info, self.max_pods, self.thresholds)
        return {
            "conditions": node_status.conditions(health, self._last_status.get("conditions", []), now_rfc3339()),
            "capacity": capacity, "allocatable": allocatable,
            "addresses": node_status.addresses(self.node_ip, self.node_name),
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.kubelet_port}},
            "nodeInfo": node_status.node_info(self.host_info, self._runtime_version, self.kubelet_version),
        }

    @staticmethod
    def _without_heartbeats(status: dict[str, Any]) -> dict[str, Any]:
        conds = [{k: v for k, v in c.items() if k != "lastHeartbeatTime"} for c in status.get("conditions", [])]
        return {**status, "conditions": conds}

    def nudge(self) -> None:
        """Compute node status now rather than at the next period (something it reports changed)."""
        self._nudged.set()

    async def _status_loop(self) -> None:
        while True:
            self._nudged.clear()
            try:
                await self.update_status()
            except errors.KubeError as e:
                log.warning("Error updating node status; will retry", node=self.node_name, err=str(e))
            await self._until_next_update()

    async def _until_next_update(self) -> None:
        """nodeStatusUpdateFrequency, or a nudge; in the fast phase, as soon as the node would be Ready."""
        deadline = time.monotonic() + self.update_seconds
        while (left := deadline - time.monotonic()) > 0:
            fast = not self._reported_ready and time.monotonic() - self._started < NODE_READY_GRACE
            try:
                await within(self._nudged.wait(), min(left, FAST_CHECK_SECONDS) if fast else left)
                return
            except asyncio.TimeoutError:
                pass
            if fast and (await self.observe_health()).ready()[0]:
                return

    async def update_status(self) -> None:
        status = self.build_status(await self.observe_health())
        changed = self._without_heartbeats(status) != self._without_heartbeats(self._last_status)
        if not changed and time.monotonic() - self._last_report < self.report_seconds:
            return
        node = await self.heartbeat.patch(f"{self.path}/status", {"status": status}, STRATEGIC_MERGE_PATCH)
        self.pod_cidrs = node["spec"].get("podCIDRs") or []
        self._record_transitions(self._last_status, status)
        self._reported_ready = self._reported_ready or node_status.is_ready(status)
        self._last_status = status
        self._last_report = time.monotonic()

    def _record_transitions(self, before: dict[str, Any], after: dict[str, Any]) -> None:
        old = {c["type"]: c["status"] for c in before.get("conditions", [])}
        for cond in after["conditions"]:
            if old.get(cond["type"]) == cond["status"]:
                continue
            if cond["type"] == "Ready":
                reason = "NodeReady" if cond["status"] == "True" else "NodeNotReady"
            else:
                reason = "Node" + cond["reason"].removeprefix("Kubelet")  # NodeHasSufficientMemory...
            self.recorder.record(node_ref(self.node_name), NORMAL, reason,
                                 f"Node {self.node_name} status is now: {reason}")
