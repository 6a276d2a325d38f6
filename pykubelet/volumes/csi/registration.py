"""The CSI side of plugin registration: which drivers may register, and what registering does.

The kubelet's CSI registration handler: a driver must offer a CSI 1.x version (and a higher one
than a driver of the same name already registered); registering it records its socket, asks the
driver for its node information (NodeGetInfo) and writes that to the Node and the CSINode
(node_info.py). Any failure undoes the registration. Deregistering removes both again.
"""

from __future__ import annotations

from typing import Protocol

from pykubelet.util.log import get_logger
from pykubelet.volumes.csi.drivers import Driver, DriverRegistry, VersionError
from pykubelet.volumes.csi.node_client import CsiCallError, CsiNodeClient, NodeInfo
from pykubelet.volumes.csi.node_info import NodeInfoError

log = get_logger(__name__)

CSI_PLUGIN = "CSIPlugin"
"""PluginInfo.type of a CSI driver (DevicePlugin and DRAPlugin are the others)."""
_PREFIX = "kubernetes.io/csi: "  # how the kubelet's CSI plugin starts its messages


class DriverInfoSink(Protocol):
    """Where a registered driver's node information goes (node_info.NodeInfoWriter)."""

    async def install_driver(self, name: str, node_id: str, max_volumes: int, topology: dict[str, str]) -> None: ...
    async def uninstall_driver(self, name: str) -> None: ...


class RegistrationError(Exception):
    """The driver cannot be registered; the message is the one the plugin is told."""


class CsiRegistrationHandler:
    """Registers CSI drivers into `drivers`, writing their node information to `sink`."""

    def __init__(self, drivers: DriverRegistry, sink: DriverInfoSink, get_info_timeout: float = 120.0):
        self.drivers = drivers
        self.sink = sink
        self.get_info_timeout = get_info_timeout

    def validate(self, name: str, endpoint: str, versions: list[str]) -> None:
        try:
            self.drivers.check_can_register(name, versions)
        except VersionError as e:
            raise RegistrationError(f"validation failed for CSI Driver {name} at endpoint {endpoint}: "
                                    f"{_PREFIX}ValidatePlugin for CSI driver {name!r} failed. {e}") from None

    async def register(self, name: str, endpoint: str, versions: list[str]) -> NodeInfo:
        """Register the driver; its node information as it was written. RegistrationError (and
        nothing registered) when it could not be."""
        try:
            version = self.drivers.check_can_register(name, versions)
        except VersionError as e:
            raise RegistrationError(f"{_PREFIX}RegisterPlugin for CSI driver {name!r} failed. {e}") from None
        self.drivers.add(Driver(name, endpoint, version))
        try:
            info = await CsiNodeClient(endpoint, self.get_info_timeout).node_get_info()
            await self.sink.install_driver(name, info.node_id, info.max_volumes_per_node, info.topology)
        except (CsiCallError, NodeInfoError) as e:  # the driver's answer or the API's: not registered, told so
            await self._unregister(name)
            raise RegistrationError(str(e)) from None
        log.info("Registered CSI driver", driver=name, endpoint=endpoint, node_id=info.node_id)
        return info

    async def deregister(self, name: str) -> None:
        await self._unregister(name)
        log.info("Deregistered CSI driver", driver=name)

    async def _unregister(self, name: str) -> None:
        self.drivers.remove(name)
        try:
            await self.sink.uninstall_driver(name)
        except NodeInfoError as e:  # the API keeps a stale entry; the driver is gone from the node all the same
            log.error("Error uninstalling CSI driver", driver=name, err=str(e))
