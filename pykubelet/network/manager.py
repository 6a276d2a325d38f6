"""The node's pod network, for the agent's lifetime (docs/network.md).

Once the podCIDR is known (config when standalone, the Node's spec.podCIDR in a cluster) it
is pushed to the runtime and the network is configured for the mode:
- agent: the shim is installed into the CNI bin dirs, leftovers of pods that are gone are
  released, the shim's socket is served, and only then containerd's conflist names the shim
  (so containerd reports NetworkReady only when the agent can answer);
- runtime with write_runtime_config: containerd's conflist is the pod network itself;
- runtime: nothing to do; a CNI DaemonSet owns the conf dir.
When the agent owns the network it also routes to every other node's podCIDR via its
InternalIP (host-gw) and masquerades only traffic leaving the cluster; and it watches that
containerd keeps using its config: while another network's config is in charge (a CNI DaemonSet
on this node), it leaves the host network alone and reports the network not ready.
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Any

import tenacity

from pykubelet.cni.client import CNI
from pykubelet.cni.config import parse_conflist
from pykubelet.cni.errors import CNIError
from pykubelet.config import STANDALONE_POD_CIDR, NetworkSettings
from pykubelet.cri import errors as cri_errors
from pykubelet.cri.client import CRIClient
from pykubelet.kube.events import NORMAL, WARNING, EventRecorder, node_ref
from pykubelet.kube.reflector import Objects, Reflector
from pykubelet.network import assets
from pykubelet.network.attachments import AttachmentRecords
from pykubelet.network.hostnet import HostNetwork, netns_path, routes_to_other_nodes
from pykubelet.network.pod_network import AgentPodNetwork
from pykubelet.network.runtime_config import Conflict, conflict, read_runtime_config
from pykubelet.network.shim_server import ShimServer
from pykubelet.util.log import get_logger

if TYPE_CHECKING:  # the client costs ~40 MB: imported only when joining a cluster
    from pykubelet.kube.client import KubeClient

log = get_logger(__name__)

LEAK_SWEEP_SECONDS = 10.0
# A sandbox whose ADD has finished is listed by the runtime once RunPodSandbox returns (it only
# has to start the pause container); what is written more recently is never taken for a leak.
ADD_SETTLE_SECONDS = 30.0
# How often the agent looks which CNI config containerd uses; the kubelet polls the runtime's
# network status as often.
RUNTIME_CONFIG_POLL_SECONDS = 5.0


class NetworkManager:
    def __init__(self, settings: NetworkSettings, cri: CRIClient, root_dir: str, node_name: str,
                 kube: KubeClient | None, recorder: EventRecorder | None = None):
        self.settings = settings
        self.recorder = recorder
        self.cri = cri
        self.node_name = node_name
        self.kube = kube
        self.state_dir = os.path.join(root_dir, "network")
        self.host = HostNetwork(settings.host_netns, settings.bridge)
        self.pod_cidr = ""
        self.ready = asyncio.Event()  # the network is configured for the mode
        self.problem = "the pod network is not set up yet"  # for the node's Ready condition; "" once ready
        self.conflict: Conflict | None = None  # another network's CNI config is in charge
        self._own_node: dict[str, Any] = {}
        self._nodes: Objects = {}  # every Node, when the agent routes to them
        self._nodes_changed = asyncio.Event()
        self._shim_server: asyncio.AbstractServer | None = None

    @property
    def owns_routing(self) -> bool:
        return self.settings.mode == "agent" or self.settings.write_runtime_config

    def _on_own_node(self, nodes: Objects) -> None:
        self._own_node = next(iter(nodes.values()), {})
        self._nodes_changed.set()

    def _on_nodes(self, nodes: Objects) -> None:
        self._nodes = dict(nodes)
        self._nodes_changed.set()

    async def _wait_pod_cidr(self) -> str:
        if self.kube is None:
            return self.settings.pod_cidr or STANDALONE_POD_CIDR
        waiting_logged = False
        while True:
            node = self._own_node
            cidr = (node.get("spec") or {}).get("podCIDR", "")
            if cidr:
                return cidr
            self.problem = "waiting for the Node's spec.podCIDR"
            if node and not waiting_logged:
                log.info("Waiting for the Node's spec.podCIDR (controller-manager --allocate-node-cidrs)",
                         node=self.node_name)
                waiting_logged = True
            self._nodes_changed.clear()
            await self._nodes_changed.wait()

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tasks:
            if self.kube is not None:
                own = {"fieldSelector": f"metadata.name={self.node_name}"}
                tasks.create_task(Reflector(self.kube, "/api/v1/nodes", own, self._on_own_node, "own node").run(),
                                  name="own-node-reflector")
                if self.owns_routing:
                    # The Node authorizer lets a node read only its own Node; reading all of them
                    # takes the RBAC grant in cni/node-network-rbac.yaml.
                    tasks.create_task(Reflector(self.kube, "/api/v1/nodes", {}, self._on_nodes, "nodes").run(),
                                      name="nodes-reflector")
            self.pod_cidr = await self._wait_pod_cidr()
            log.info("Pod network", mode=self.settings.mode, podCIDR=self.pod_cidr,
                     writesConfig=self.owns_routing, hostNetns=self.host.netns or "own")
            await self._push_to_runtime()
            # A network that cannot be set up (no CNI plugins, an unwritable conf dir...) keeps the
            # node NotReady and is retried; it never stops the agent or its running pods.
            async for attempt in tenacity.AsyncRetrying(
                    retry=tenacity.retry_if_exception_type((OSError, ValueError, CNIError, cri_errors.CRIError)),
                    wait=tenacity.wait_exponential(multiplier=1, max=30),
                    before_sleep=self._setup_failed):
                with attempt:
                    await self._configure(tasks)
            if self.owns_routing:
                await self._check_runtime_config()  # before the routes: they are not ours to touch then
                tasks.create_task(self._watch_runtime_config(), name="cni-runtime-config-watch")
                await self._sync_host_network()
            self._report()
            if not self.owns_routing:
                await asyncio.Event().wait()  # nothing more to follow; runs until the agent stops
            while True:  # Nodes that change, and the agent's config back in charge
                self._nodes_changed.clear()
                await self._nodes_changed.wait()
                await self._sync_host_network()
                self._report()

    def _setup_failed(self, state: tenacity.RetryCallState) -> None:
        err = str(state.outcome.exception()) if state.outcome else ""
        self.problem = f"pod network setup failed: {err}"
        log.error("Cannot set up the pod network; retrying", mode=self.settings.mode, err=err)

    async def _push_to_runtime(self) -> None:
        try:
            await self.cri.update_runtime_config(self.pod_cidr)
        except cri_errors.CRIError as e:
            log.warning("Runtime did not take the podCIDR", err=str(e))

    async def _configure(self, tasks: asyncio.TaskGroup) -> None:
        pod_network = assets.render("pod-network.conflist", bridge=self.settings.bridge, pod_cidr=self.pod_cidr,
                                    ipam_dir=os.path.join(self.state_dir, "ipam"))
        if self.settings.mode == "agent":
            if self._shim_server is None:
                attachments = await self._agent_pod_network(pod_network)
                self._shim_server = await ShimServer(self.settings.socket, attachments.handle).start()
                tasks.create_task(self._shim_server.serve_forever(), name="cni-shim-server")
                tasks.create_task(self._sweep_leaks(attachments), name="pod-network-leak-sweep")
            # Only now containerd learns of the shim: it reports NetworkReady once we can answer.
            assets.write_conflist(self.settings.cni_conf_dir,
                                  assets.render("containerd-agent-mode.conflist", socket=self.settings.socket))
        elif self.settings.write_runtime_config:
            assets.write_conflist(self.settings.cni_conf_dir, pod_network)

    async def _agent_pod_network(self, pod_network: dict[str, Any]) -> AgentPodNetwork:
        """The shim installed and what pods that are gone left released, before the shim is served."""
        network = parse_conflist(pod_network, source="cni/pod-network.conflist")
        cni = CNI(self.settings.cni_bin_dirs, plugin_netns=netns_path(self.settings.host_netns) or None)
        attachments = AgentPodNetwork(cni, network, AttachmentRecords(os.path.join(self.state_dir, "attachments")),
                                      ipam_dir=os.path.join(self.state_dir, "ipam"))
        installed = assets.install_shim(self.settings.cni_bin_dirs)
        log.info("CNI shim installed", dirs=",".join(installed))
        live = {s.id for s in await self.cri.list_pod_sandbox()}
        await attachments.release_leaks(live)
        await attachments.collect_garbage(live)
        return attachments

    async def _sweep_leaks(self, attachments: AgentPodNetwork) -> None:
        """Release, while running, what sandboxes the runtime no longer has still hold.

        The release at start catches what happened while no agent ran; this catches what
        happens while one does: a DEL that came while the agent was restarting (the shim
        answers it without us, so a pod can always be removed), or a runtime killed between
        our ADD and storing its sandbox, which then never sends a DEL at all.
        """
        while True:
            await asyncio.sleep(LEAK_SWEEP_SECONDS)
            try:
                live = {s.id for s in await self.cri.list_pod_sandbox()}
            except cri_errors.CRIError as e:
                log.debug("Runtime not answering; leak sweep skipped", err=str(e))
                continue
            await attachments.release_leaks(live, quiet_seconds=ADD_SETTLE_SECONDS)

    def _report(self) -> None:
        """Ready, or not ready for the conflict (once the network is set up)."""
        if self.conflict is not None:
            self.problem = str(self.conflict)
            self.ready.clear()
        else:
            self.problem = ""
            self.ready.set()

    async def _watch_runtime_config(self) -> None:
        while True:
            await asyncio.sleep(RUNTIME_CONFIG_POLL_SECONDS)
            await self._check_runtime_config()

    async def _check_runtime_config(self) -> None:
        """Notice another network's config taking over from the agent's, and its going away."""
        try:
            config = await asyncio.to_thread(read_runtime_config, self.settings.cni_conf_dir)
        except OSError as e:
            log.debug("Cannot read the CNI conf dir; checked again later", dir=self.settings.cni_conf_dir, err=str(e))
            return
        found = conflict(config, self.settings)
        if found == self.conflict:
            return
        self.conflict = found
        if found is not None:
            # The routes stay as they are: deleting ours would cut off the pods already on the
            # agent's network, and rewriting them would fight the other network's agent.
            log.error("Another network's CNI config is the one containerd uses: the agent leaves the node's "
                      "routes alone and reports the network not ready until it is gone", file=found.path,
                      confDir=config.conf_dir, fix=found.fix)
            self._event(WARNING, "CNIConfigConflict", f"{found}; {found.fix}")
            self._report()
        else:
            log.info("containerd uses the agent's CNI config again: routing to the other nodes' pods resumes",
                     confDir=config.conf_dir)
            self._event(NORMAL, "CNIConfigRestored",
                        f"containerd uses the agent's CNI config in {config.conf_dir} again")
            self.host.forget()  # the other network may have changed what we wrote
            self._nodes_changed.set()  # ready again once the routes are ours again

    def _event(self, kind: str, reason: str, message: str) -> None:
        if self.recorder is not None:
            self.recorder.record(node_ref(self.node_name), kind, reason, message)

    async def _sync_host_network(self) -> None:
        if self.conflict is not None:
            return  # another network owns the node's routes now (see _check_runtime_config)
        routes, cidrs = routes_to_other_nodes(self.node_name, self._own_node, self._nodes.values())
        cidrs.add(self.pod_cidr)
        try:
            await self.host.sync_masquerade(self.pod_cidr, sorted(cidrs))
            await self.host.sync_routes(routes)
        except (RuntimeError, OSError) as e:
            log.warning("Could not program the host network; retrying on the next change", err=str(e))
