"""The CNI client: runs a network's plugin chain for ADD, DEL, CHECK, GC, STATUS and VERSION.

It follows the CNI spec's "execution of network configurations" (1.0.0/1.1.0) the way libcni
does, without libcni's result cache: the caller keeps each ADD's Result and gives it back for
CHECK and DEL. Like containerd, DEL treats "already gone" answers as success, so it can be
repeated, and run with an empty netns after the namespace is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import AsyncIterator, Sequence

from pykubelet.cni import errors
from pykubelet.cni.config import NetworkConfigList, version_key
from pykubelet.cni.invoke import decode_json, find_plugin, run_plugin
from pykubelet.cni.request import (Attachment, gc_request, plugin_env, plugin_request,
                                   status_request)
from pykubelet.cni.result import Result, ResultError, parse_result
from pykubelet.util.log import get_logger

__all__ = ["Attachment", "CNI"]

log = get_logger(__name__)

# GC and STATUS exist from this spec version on.
GC_VERSION = "1.1.0"
# What we tell a plugin we speak when asking VERSION.
CLIENT_VERSION = "1.1.0"


class CNI:
    """Runs plugins found in `bin_dirs`, each exec bounded by `timeout` seconds.

    `plugin_netns` is the path of a network namespace the plugin processes run in (default:
    ours): where a node is itself a netns, its bridge and iptables rules belong in there.
    """

    def __init__(self, bin_dirs: Sequence[str], *, timeout: float = 60, plugin_netns: str | None = None):
        if not bin_dirs:
            raise ValueError("CNI needs at least one plugin directory")
        self.bin_dirs = tuple(bin_dirs)
        self.timeout = timeout
        self.plugin_netns = plugin_netns
        self._versions: dict[tuple[str, int], list[str]] = {}
        # The spec: GC runs alone, never while an ADD or DEL is in progress (see _exclusive).
        self._turn = asyncio.Condition()
        self._running = 0
        self._gc_active = False
        self._gc_waiting = 0

    async def add(self, net: NetworkConfigList, att: Attachment) -> Result:
        """ADD every plugin in order, each given the previous one's result; the final result.

        On failure the caller must still call delete() (the spec: a DEL follows every ADD).
        """
        async with self._shared():
            return await self._add(net, att)

    async def _add(self, net: NetworkConfigList, att: Attachment) -> Result:
        prev: dict | None = None
        result: Result | None = None
        for plugin in net.plugins:
            request = plugin_request(net.name, net.cni_version, plugin, att.capability_args, prev)
            stdout = await self._exec(plugin["type"], "ADD", request, att)
            answer = decode_json(plugin["type"], "ADD", stdout)
            try:
                result = parse_result(answer, net.cni_version)
            except ResultError as e:
                raise errors.CNIError(plugin["type"], "ADD", errors.DECODING_FAILURE, "invalid result", str(e)) from None
            prev = answer
        assert result is not None  # a NetworkConfigList has at least one plugin
        log.debug("CNI ADD done", network=net.name, containerID=att.container_id, ifname=att.ifname,
                  ips=",".join(str(ip.address) for ip in result.ips))
        return result

    async def delete(self, net: NetworkConfigList, att: Attachment, prev_result: Result | None = None) -> None:
        """DEL every plugin in reverse order. Idempotent: what is already gone is success."""
        async with self._shared():
            await self._delete(net, att, prev_result)

    async def _delete(self, net: NetworkConfigList, att: Attachment, prev_result: Result | None) -> None:
        prev = prev_result.to_dict(net.cni_version) if prev_result is not None else None
        for plugin in reversed(net.plugins):
            request = plugin_request(net.name, net.cni_version, plugin, att.capability_args, prev)
            try:
                await self._exec(plugin["type"], "DEL", request, att)
            except errors.PluginNotFound:
                raise
            except errors.CNIError as e:
                if not _already_gone(e, att):
                    raise
                log.debug("CNI DEL: already gone", network=net.name, plugin=plugin["type"],
                          containerID=att.container_id, error=str(e))
        log.debug("CNI DEL done", network=net.name, containerID=att.container_id, ifname=att.ifname)

    async def check(self, net: NetworkConfigList, att: Attachment, prev_result: Result) -> None:
        """CHECK every plugin in order against the ADD's result; skipped when disableCheck."""
        if net.disable_check:
            log.debug("CNI CHECK skipped: disableCheck", network=net.name, containerID=att.container_id)
            return
        if version_key(net.cni_version) < (0, 4, 0):
            raise errors.CNIError(net.plugins[0]["type"], "CHECK", errors.INCOMPATIBLE_CNI_VERSION,
                                  f"CHECK needs cniVersion 0.4.0 or later, network {net.name} has {net.cni_version}")
        prev = prev_result.to_dict(net.cni_version)
        for plugin in net.plugins:
            request = plugin_request(net.name, net.cni_version, plugin, att.capability_args, prev)
            await self._exec(plugin["type"], "CHECK", request, att)

    async def version(self, plugin_type: str) -> list[str]:
        """The spec versions the plugin supports (its VERSION answer's supportedVersions)."""
        path = find_plugin(plugin_type, self.bin_dirs, "VERSION")
        try:
            key = (path, os.stat(path).st_mtime_ns)  # a replaced binary is asked again
        except OSError:
            key = (path, 0)
        if key in self._versions:
            return list(self._versions[key])
        stdout = await run_plugin(path, plugin_type, "VERSION", {"cniVersion": CLIENT_VERSION},
                                  plugin_env("VERSION", self.bin_dirs), self.timeout, self.plugin_netns)
        answer = decode_json(plugin_type, "VERSION", stdout)
        supported = answer.get("supportedVersions") if isinstance(answer, dict) else None
        if not isinstance(supported, list) or not all(isinstance(v, str) for v in supported):
            raise errors.CNIError(plugin_type, "VERSION", errors.DECODING_FAILURE,
                                  "invalid VERSION answer: supportedVersions must be a list of strings",
                                  stdout[:200].decode(errors="replace"))
        self._versions[key] = list(supported)
        return list(supported)

    async def gc(self, net: NetworkConfigList, valid: Sequence[Attachment]) -> None:
        """CNI 1.1 GC: plugins drop what belongs to attachments not in `valid`.

        Only plugins whose VERSION lists 1.1.0 are asked (older ones know no GC); the request
        uses cniVersion 1.1.0, the first with GC, whatever the list's version (within major 1
        the config format is the same). Like libcni, every plugin is asked even if one fails.
        """
        if net.disable_gc:
            log.debug("CNI GC skipped: disableGC", network=net.name)
            return
        async with self._exclusive():
            await self._gc(net, valid)

    async def _gc(self, net: NetworkConfigList, valid: Sequence[Attachment]) -> None:
        failures: list[errors.CNIError] = []
        for plugin in net.plugins:
            plugin_type = plugin["type"]
            try:
                if GC_VERSION not in await self.version(plugin_type):
                    log.debug("CNI GC skipped: plugin predates 1.1.0", network=net.name, plugin=plugin_type)
                    continue
                request = gc_request(net.name, _at_least(net.cni_version, GC_VERSION), plugin, valid)
                await self._exec(plugin_type, "GC", request, None)
            except errors.CNIError as e:
                log.warning("CNI GC failed", network=net.name, plugin=plugin_type, error=str(e))
                failures.append(e)
        if len(failures) == 1:
            raise failures[0]
        if failures:
            raise errors.CNIError(",".join(e.plugin for e in failures), "GC", failures[0].code,
                                  f"{len(failures)} plugins failed", "; ".join(str(e) for e in failures))

    async def status(self, net: NetworkConfigList) -> None:
        """CNI 1.1 STATUS: CNIError (code 50/51) if a plugin cannot take ADDs now.

        Plugins that predate 1.1.0 have no STATUS and count as ready.
        """
        for plugin in net.plugins:
            plugin_type = plugin["type"]
            if GC_VERSION not in await self.version(plugin_type):
                continue
            request = status_request(net.name, _at_least(net.cni_version, GC_VERSION), plugin)
            await self._exec(plugin_type, "STATUS", request, None)

    @contextlib.asynccontextmanager
    async def _shared(self) -> AsyncIterator[None]:
        """ADD and DEL run side by side, but not during a GC, nor ahead of one that waits."""
        async with self._turn:
            await self._turn.wait_for(lambda: not self._gc_active and not self._gc_waiting)
            self._running += 1
        try:
            yield
        finally:
            async with self._turn:
                self._running -= 1
                self._turn.notify_all()

    @contextlib.asynccontextmanager
    async def _exclusive(self) -> AsyncIterator[None]:
        async with self._turn:
            self._gc_waiting += 1
            try:
                await self._turn.wait_for(lambda: not self._gc_active and not self._running)
            finally:
                self._gc_waiting -= 1
            self._gc_active = True
        try:
            yield
        finally:
            async with self._turn:
                self._gc_active = False
                self._turn.notify_all()

    async def _exec(self, plugin_type: str, command: str, request: dict, att: Attachment | None) -> bytes:
        path = find_plugin(plugin_type, self.bin_dirs, command)
        return await run_plugin(path, plugin_type, command, request,
                                plugin_env(command, self.bin_dirs, att), self.timeout, self.plugin_netns)


def _at_least(version: str, floor: str) -> str:
    return version if version_key(version) >= version_key(floor) else floor


def _already_gone(error: errors.CNIError, att: Attachment) -> bool:
    """DEL answers that mean there is nothing left to remove (as containerd's go-cni reads them)."""
    if error.code == errors.UNKNOWN_CONTAINER:
        return True
    text = str(error).lower()
    if "not found" in text and "executable file not found" not in text:  # a missing iptables is real
        return True
    # Without a netns the plugins cannot enter it; what they could reach is cleaned.
    return not att.netns and "no such file or directory" in text
