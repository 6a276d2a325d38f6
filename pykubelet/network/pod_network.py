"""Agent mode: the agent runs the standard CNI plugins for each sandbox containerd creates.

The shim hands over ADD/DEL/CHECK; this runs the pod network's chain (bridge + host-local +
portmap) into the sandbox's netns, checks the result there with pyroute2, and records it.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import time
from collections import defaultdict
from typing import Any

from pykubelet.cni.client import CNI, Attachment
from pykubelet.cni.config import NetworkConfigList
from pykubelet.cni.errors import CNIError
from pykubelet.cni.result import Result, parse_result
from pykubelet.network.attachments import AttachmentRecords
from pykubelet.util.log import get_logger
from pykubelet.util.netns import iproute

log = get_logger(__name__)

INTERNAL_ERROR = 999


class AgentPodNetwork:
    def __init__(self, cni: CNI, network: NetworkConfigList, records: AttachmentRecords, ipam_dir: str):
        self.cni = cni
        self.network = network
        self.records = records
        self.ipam_dir = ipam_dir  # host-local's dataDir: <ipam_dir>/<network name>/<ip> = owner
        self._locks: dict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    def _prev_result(self, container_id: str) -> Result | None:
        record = self.records.load(container_id)
        if not record or "result" not in record:
            return None
        return parse_result(record["result"], record["result"].get("cniVersion", self.network.cni_version))

    async def handle(self, command: str, att: Attachment) -> dict[str, Any] | None:
        """The shim's request; returns what the shim prints (the result for ADD)."""
        async with self._locks[att.container_id]:
            try:
                if command == "ADD":
                    return (await self.add(att)).to_dict()
                if command == "DEL":
                    await self.delete(att)
                else:
                    await self.check(att)
                return None
            finally:
                if not self._locks[att.container_id].locked():
                    self._locks.pop(att.container_id, None)

    async def add(self, att: Attachment) -> Result:
        result = await self.cni.add(self.network, att)
        try:
            await verify_attachment(att, result)
        except CNIError:
            await self.cni.delete(self.network, att, result)
            raise
        # The capability args (portMappings) too: portmap's DEL removes the hostPort rules only
        # when it is told the mappings again, and a leftover released after a restart has no
        # containerd request to take them from.
        # Written durably (fsync): in a thread, never holding up the event loop on the disk.
        await asyncio.to_thread(self.records.save, att.container_id, {
            "netns": att.netns, "ifname": att.ifname, "args": dict(att.args),
            "capability_args": dict(att.capability_args), "result": result.to_dict()})
        ip = result.ip_of(att.ifname)
        log.info("Pod network attached", container=att.container_id[:13], pod=_pod_of(att),
                 ip=str(ip.address.ip) if ip else "")
        return result

    async def delete(self, att: Attachment) -> None:
        if self.records.load(att.container_id) is None and att.container_id not in self.ip_owners().values():
            # Nothing of it left: containerd's second DEL (it sends one with and one without the
            # netns) need not run the whole chain again.
            return
        await self.cni.delete(self.network, att, self._prev_result(att.container_id))
        self.records.remove(att.container_id)
        log.info("Pod network detached", container=att.container_id[:13], pod=_pod_of(att))

    async def check(self, att: Attachment) -> None:
        prev = self._prev_result(att.container_id)
        if prev is None:
            raise CNIError("pykubelet", "CHECK", INTERNAL_ERROR,
                           f"no network attachment recorded for {att.container_id}")
        await self.cni.check(self.network, att, prev)

    def ip_owners(self) -> dict[str, str]:
        """host-local's reservations: IP -> container ID."""
        return {ip: owner for ip, (owner, _) in self._reservations().items()}

    def _reservations(self) -> dict[str, tuple[str, float]]:
        """host-local's reservations: IP -> (container ID, when it was written)."""
        owners = {}
        directory = os.path.join(self.ipam_dir, self.network.name)
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            return {}
        for name in names:
            try:
                ipaddress.ip_address(name)
                path = os.path.join(directory, name)
                with open(path, encoding="utf-8") as f:
                    owners[name] = (f.read().split()[0].strip(), os.stat(path).st_mtime)
            except (ValueError, OSError, IndexError):
                continue
        return owners

    def _last_written(self) -> dict[str, float]:
        """Every sandbox the network holds something for -> when its newest record or reservation was written."""
        written: dict[str, float] = {}
        for owner, mtime in self._reservations().values():
            written[owner] = max(mtime, written.get(owner, 0.0))
        for container_id in self.records.ids():
            written[container_id] = max(self.records.written(container_id), written.get(container_id, 0.0))
        return written

    async def release_leaks(self, live_sandboxes: set[str], quiet_seconds: float = 0.0) -> list[str]:
        """DEL every attachment whose sandbox no longer exists; returns their container IDs.

        Leftovers come from an agent that died mid ADD/DEL (containerd's DEL then reached no one),
        a pod removed while the agent was down, or a runtime that died between our ADD and storing
        its sandbox. `quiet_seconds` spares what was written more recently than that: a sandbox
        whose ADD just finished is not listed by the runtime until RunPodSandbox returns.
        Attachments with an ADD/DEL under way are never touched.
        """
        now = time.time()
        gone = {cid for cid, written in self._last_written().items()
                if cid not in live_sandboxes and cid not in self._locks and now - written >= quiet_seconds}
        for container_id in sorted(gone):
            async with self._locks[container_id]:
                await self._release(container_id)
            self._locks.pop(container_id, None)
        if gone:
            log.info("Released the network of pods that are gone", count=len(gone))
        return sorted(gone)

    async def collect_garbage(self, live_sandboxes: set[str]) -> None:
        """A CNI 1.1 GC naming the attachments that stay (a no-op for plugins that predate GC).

        Only while no ADD can be under way (before the shim's socket is served): GC removes
        whatever it is not told about, and a sandbox whose ADD is running is not listed yet.
        """
        valid = [Attachment(container_id=cid, netns="", ifname=(self.records.load(cid) or {}).get("ifname", "eth0"))
                 for cid in sorted(self.records.ids() & live_sandboxes)]
        try:
            await self.cni.gc(self.network, valid)
        except CNIError as e:
            log.warning("CNI GC failed", err=str(e))

    async def _release(self, container_id: str) -> None:
        record = self.records.load(container_id) or {}
        att = Attachment(container_id=container_id, netns="", ifname=record.get("ifname", "eth0"),
                         args=tuple((record.get("args") or {}).items()),
                         capability_args=record.get("capability_args") or {})
        try:
            await self.delete(att)
        except CNIError as e:
            log.warning("Could not release a leftover pod network attachment", container=container_id[:13],
                        err=str(e))


async def verify_attachment(att: Attachment, result: Result) -> None:
    """The result's address is really on the interface inside the pod's netns."""
    expected = result.ip_of(att.ifname)
    if expected is None:
        raise CNIError("pykubelet", "ADD", INTERNAL_ERROR, f"the network result has no IP on {att.ifname}",
                       str(result.raw))
    async with await iproute(att.netns) as ipr:
        found = set()
        async for link in await ipr.link("dump"):
            if link.get("ifname") == att.ifname:
                async for addr in await ipr.addr("dump", index=link["index"]):
                    found.add(f"{addr.get('address')}/{addr['prefixlen']}")
    if str(expected.address) not in found:
        raise CNIError("pykubelet", "ADD", INTERNAL_ERROR,
                       f"{att.ifname} in {att.netns} does not hold {expected.address}",
                       f"addresses found: {sorted(found) or 'none'}")


def _pod_of(att: Attachment) -> str:
    args = dict(att.args)
    return f"{args.get('K8S_POD_NAMESPACE', '')}/{args.get('K8S_POD_NAME', '')}"
