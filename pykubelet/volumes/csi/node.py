"""The node's CSI parts, connected: the registered drivers, the registration directory's watcher
(which fills them and writes their node information to the API), and the PersistentVolume set-up
(which uses them). Built once per agent that talks to an apiserver; the watcher's run() is one of
the agent's loops."""

from __future__ import annotations

from dataclasses import dataclass

from pykubelet.volumes.csi.drivers import DriverRegistry
from pykubelet.volumes.csi.node_info import Client, NodeInfoWriter
from pykubelet.volumes.csi.operations import CsiNodeOperations
from pykubelet.volumes.csi.plugin_watcher import PluginWatcher, registry_dir
from pykubelet.volumes.csi.pv_setup import CsiPersistentVolumes
from pykubelet.volumes.csi.registration import CsiRegistrationHandler
from pykubelet.volumes.csi.sa_tokens import TokenSource


@dataclass(frozen=True)
class CsiNode:
    drivers: DriverRegistry
    watcher: PluginWatcher
    volumes: CsiPersistentVolumes


def build_csi_node(root_dir: str, node_name: str, kube: Client, tokens: TokenSource | None = None) -> CsiNode:
    """tokens: the pods' service account tokens, for drivers whose CSIDriver asks for them."""
    drivers = DriverRegistry()
    handler = CsiRegistrationHandler(drivers, NodeInfoWriter(kube, node_name))
    return CsiNode(drivers, PluginWatcher(registry_dir(root_dir), handler),
                   CsiPersistentVolumes(CsiNodeOperations(root_dir, node_name, drivers), kube.get, tokens))
