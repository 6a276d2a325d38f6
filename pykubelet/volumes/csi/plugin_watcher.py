"""The plugin registration directory (<root-dir>/plugins_registry): plugins come and go as sockets.

The kubelet's plugin manager, for CSI drivers: every second the directory (and the directories
in it) is scanned off the event loop for unix sockets (names starting with '.' are ignored). A
new socket is a plugin asking to register: the agent asks it who it is (Registration.GetInfo),
hands a CSIPlugin to the CSI handler, and tells the plugin the outcome
(NotifyRegistrationStatus: true, or false with the error; node-driver-registrar exits on false).
A socket that goes away, or is re-created (another inode), deregisters its plugin first. A plugin
that failed is tried again with back-off. Every call has the kubelet's deadline, so a plugin that
never answers holds up nothing but its own registration.
"""

from __future__ import annotations

import asyncio
import os
import stat
from dataclasses import dataclass

import grpc

from pykubelet.util.backoff import Backoff
from pykubelet.util.log import get_logger
from pykubelet.volumes.csi.pluginregistration.v1 import api_pb2 as reg
from pykubelet.volumes.csi.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from pykubelet.volumes.csi.registration import CSI_PLUGIN, CsiRegistrationHandler, RegistrationError
from pykubelet.util.timeouts import within

log = get_logger(__name__)

REGISTRY_DIR_NAME = "plugins_registry"
SCAN_PERIOD = 1.0
DIAL_TIMEOUT = 10.0
GET_INFO_TIMEOUT = 1.0
NOTIFY_TIMEOUT = 5.0
RETRY_INITIAL, RETRY_MAX = 0.5, 122.0  # the kubelet's per-operation back-off


@dataclass(frozen=True)
class Registered:
    """A plugin registered through a socket: which socket (its identity) and which driver."""

    identity: tuple[int, int]
    name: str


def registry_dir(root_dir: str) -> str:
    return os.path.join(root_dir, REGISTRY_DIR_NAME)


def scan(directory: str) -> dict[str, tuple[int, int]]:
    """The unix sockets under directory: path -> (inode, change time), which changes when a
    plugin re-creates its socket (blocking). The directory is made (0750) if missing."""
    os.makedirs(directory, mode=0o750, exist_ok=True)
    found: dict[str, tuple[int, int]] = {}
    pending = [directory]
    while pending:
        current = pending.pop()
        try:
            entries = list(os.scandir(current))
        except OSError:
            continue  # a subdirectory removed while scanning
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                pending.append(entry.path)
            elif stat.S_ISSOCK(st.st_mode):
                found[entry.path] = (st.st_ino, st.st_ctime_ns)
    return found


class PluginWatcher:
    """Registers the plugins whose sockets appear in `directory` with the CSI handler."""

    def __init__(self, directory: str, handler: CsiRegistrationHandler, period: float = SCAN_PERIOD,
                 dial_timeout: float = DIAL_TIMEOUT):
        self.directory = directory
        self.handler = handler
        self.period = period
        self.dial_timeout = dial_timeout
        self.registered: dict[str, Registered] = {}
        """Socket path -> the plugin registered through it."""
        self._backoff = Backoff(RETRY_INITIAL, RETRY_MAX)

    async def run(self) -> None:
        """Reconcile every period until cancelled; one bad plugin never stops the loop."""
        while True:
            try:
                await self.sync_once()
            except Exception as e:  # the directory unreadable: try again next period
                log.error("Plugin registration scan failed", dir=self.directory, err=str(e))
            await asyncio.sleep(self.period)

    async def sync_once(self) -> None:
        sockets = await asyncio.to_thread(scan, self.directory)
        for path, plugin in list(self.registered.items()):
            if sockets.get(path) != plugin.identity:
                del self.registered[path]
                await self.handler.deregister(plugin.name)
        new = [(path, identity) for path, identity in sorted(sockets.items())
               if path not in self.registered and not self._backoff.in_backoff_since_update(f"{path}\0{identity}")]
        # Side by side: a stale socket nobody answers on holds up only its own registration.
        names = await asyncio.gather(*(self._register(path, identity) for path, identity in new))
        for (path, identity), name in zip(new, names):
            key = f"{path}\0{identity}"
            if name is None:
                self._backoff.next(key, self._backoff.clock())
            else:
                self._backoff.forget(key)

    async def _register(self, path: str, identity: tuple[int, int]) -> str | None:
        """Register the plugin at the socket; its name, or None when it was not registered."""
        try:
            async with grpc.aio.insecure_channel(f"unix://{path}") as channel:
                await within(channel.channel_ready(), self.dial_timeout)
                stub = reg_grpc.RegistrationStub(channel)
                info = await stub.GetInfo(reg.InfoRequest(), timeout=GET_INFO_TIMEOUT)
                error = await self._try_register(path, identity, info)
                await stub.NotifyRegistrationStatus(
                    reg.RegistrationStatus(plugin_registered=error is None, error=error or ""), timeout=NOTIFY_TIMEOUT)
        except (grpc.aio.AioRpcError, asyncio.TimeoutError) as e:
            why = e.details() if isinstance(e, grpc.aio.AioRpcError) else "timed out"
            log.warning("RegisterPlugin error: plugin did not answer", socket=path, err=why)
            await self._forget(path)  # registered but never told so: undo, as the kubelet does
            return None
        if error is not None:
            log.warning("RegisterPlugin failed", socket=path, err=error)
            return None
        return info.name

    async def _try_register(self, path: str, identity: tuple[int, int], info: reg.PluginInfo) -> str | None:
        """None when the plugin was registered, else the error the plugin is told."""
        if info.type != CSI_PLUGIN:
            return f"RegisterPlugin error -- no handler registered for plugin type: {info.type} at socket {path}"
        endpoint = info.endpoint or path
        versions = list(info.supported_versions)
        try:
            self.handler.validate(info.name, endpoint, versions)
        except RegistrationError as e:
            return f"RegisterPlugin error -- plugin validation failed with err: {e}"
        try:
            await self.handler.register(info.name, endpoint, versions)
        except RegistrationError as e:
            return f"RegisterPlugin error -- plugin registration failed with err: {e}"
        self.registered[path] = Registered(identity, info.name)
        return None

    async def _forget(self, path: str) -> None:
        plugin = self.registered.pop(path, None)
        if plugin is not None:
            await self.handler.deregister(plugin.name)
