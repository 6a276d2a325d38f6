"""The IPVS mode's kernel side: virtual and real servers over IPVS generic netlink, and the
kube-ipvs0 dummy interface with its addresses over rtnetlink, both through pyroute2's asyncio
sockets (no blocking call on the event loop; kube-proxy uses netlink for both too).

pyroute2 (>= 0.8.1) speaks IPVS; three of its traps are avoided here: its "update" command sends
a *delete* (so changes use "set"), its real servers default to direct routing (ipvsadm's default;
kube-proxy's are masqueraded, so the forwarding method is always given), and its record helpers
do not read a dumped scheduler name or weight back (so dumps are parsed from the attributes).
Fwmark virtual servers (no address) are never ours and are left alone.
"""

from __future__ import annotations

import errno
import socket
from typing import Any

from pyroute2 import AsyncIPRoute, AsyncIPVS, IPVSDest, IPVSService
from pyroute2.netlink.exceptions import NetlinkError

from pykubelet.proxy.commands import CommandFailed, run
from pykubelet.proxy.ipvs_diff import Dest, Kernel, KernelService, Pair, Plan, deletable, termination_key
from pykubelet.proxy.ipvs_state import DUMMY_DEVICE, FLAG_HASHED, RealServer, VirtualServer
from pykubelet.util.log import get_logger

log = get_logger(__name__)

PROTOCOLS = {"TCP": socket.IPPROTO_TCP, "UDP": socket.IPPROTO_UDP, "SCTP": socket.IPPROTO_SCTP}
PROTOCOL_NAMES = {number: name for name, number in PROTOCOLS.items()}
FLAGS_MASK = 0xFFFFFFFF
# IP_VS_CONN_F_MASQ: real servers are reached by NAT, the reply un-NATed on its way back. 3 would
# be direct routing: the packet goes to the pod still addressed to the VIP, which it drops.
MASQUERADE, FORWARD_MASK = 0, 0x7


def service_record(vs: VirtualServer) -> IPVSService:
    return IPVSService(addr=vs.address, port=vs.port, protocol=PROTOCOLS[vs.protocol], sched_name=vs.scheduler,
                       flags={"flags": vs.flags, "mask": FLAGS_MASK}, timeout=vs.timeout)


def dest_record(rs: RealServer, weight: int) -> IPVSDest:
    return IPVSDest(addr=rs.address, port=rs.port, weight=weight, fwd_method=MASQUERADE)


def parse_service(msg: Any) -> VirtualServer | None:
    """A dumped virtual server; None for a fwmark one or a protocol we do not know."""
    svc = msg.get_attr("IPVS_CMD_ATTR_SERVICE")
    address, protocol = svc.get_attr("IPVS_SVC_ATTR_ADDR"), svc.get_attr("IPVS_SVC_ATTR_PROTOCOL")
    if not address or protocol not in PROTOCOL_NAMES:
        return None
    flags = (svc.get_attr("IPVS_SVC_ATTR_FLAGS") or {}).get("flags", 0)
    return VirtualServer(address, svc.get_attr("IPVS_SVC_ATTR_PORT"), PROTOCOL_NAMES[protocol],
                         svc.get_attr("IPVS_SVC_ATTR_SCHED_NAME") or "", flags & ~FLAG_HASHED,
                         svc.get_attr("IPVS_SVC_ATTR_TIMEOUT") or 0)


def parse_dest(msg: Any) -> Dest:
    dest = msg.get_attr("IPVS_CMD_ATTR_DEST")
    forward = (dest.get_attr("IPVS_DEST_ATTR_FWD_METHOD") or 0) & FORWARD_MASK
    return Dest(RealServer(dest.get_attr("IPVS_DEST_ATTR_ADDR"), dest.get_attr("IPVS_DEST_ATTR_PORT")),
                dest.get_attr("IPVS_DEST_ATTR_WEIGHT") or 0, dest.get_attr("IPVS_DEST_ATTR_ACTIVE_CONNS") or 0,
                dest.get_attr("IPVS_DEST_ATTR_INACT_CONNS") or 0, forward == MASQUERADE)


def _ignore(e: NetlinkError, *codes: int) -> None:
    if e.code not in codes:
        raise e


class IpvsKernel:
    """One IPVS netlink socket for the backend's life (a sync at a time uses it)."""

    def __init__(self) -> None:
        self._ipvs: AsyncIPVS | None = None

    async def open(self) -> None:
        """Bind the IPVS family, loading ip_vs first if the kernel does not have it yet."""
        for attempt in (1, 2):
            ipvs = AsyncIPVS()
            try:
                await ipvs.setup_endpoint()
                self._ipvs = ipvs
                return
            except NetlinkError as e:
                ipvs.close()
                if attempt == 2 or e.code != errno.ENOENT:
                    raise RuntimeError(f"IPVS is not available in this kernel (load ip_vs): {e}") from None
            try:
                await run("modprobe", "ip_vs")
            except CommandFailed as e:
                raise RuntimeError(f"IPVS is not available in this kernel: {e}") from None

    async def check_scheduler(self, scheduler: str) -> None:
        """The kernel has `scheduler` (it loads ip_vs_<name> on demand): a throwaway virtual server
        with it is added and deleted, as kube-proxy checks before it starts."""
        probe = VirtualServer("198.51.100.0", 20000, "TCP", scheduler)
        try:
            await self.ipvs.service("add", service=service_record(probe))
        except NetlinkError as e:
            if e.code != errno.EEXIST:
                raise RuntimeError(f"the IPVS scheduler {scheduler!r} is not available in this kernel: {e}") from None
        await self.ipvs.service("del", service=service_record(probe))

    def close(self) -> None:
        if self._ipvs is not None:
            self._ipvs.close()
            self._ipvs = None

    @property
    def ipvs(self) -> AsyncIPVS:
        assert self._ipvs is not None, "open() first"
        return self._ipvs

    async def dests(self, vs: VirtualServer) -> dict[RealServer, Dest]:
        found = [parse_dest(m) for m in await self.ipvs.dest("dump", service=service_record(vs))]
        return {d.server: d for d in found}

    async def read(self) -> Kernel:
        out: Kernel = {}
        for msg in await self.ipvs.service("dump"):
            vs = parse_service(msg)
            if vs is not None:
                out[vs.key] = KernelService(vs, await self.dests(vs))
        return out

    async def _dest(self, command: str, vs: VirtualServer, rs: RealServer, weight: int = 1) -> None:
        try:
            await self.ipvs.dest(command, service=service_record(vs), dest=dest_record(rs, weight))
        except NetlinkError as e:  # already there / already gone: the state we wanted
            _ignore(e, errno.EEXIST if command == "add" else errno.ENOENT)

    async def apply(self, plan: Plan, terminating: dict[str, Pair]) -> None:
        """Carry the plan out; retired real servers that still have connections join `terminating`."""
        for vs in plan.add_services:
            try:
                await self.ipvs.service("add", service=service_record(vs))
            except NetlinkError as e:
                if e.code != errno.EEXIST:  # ENOENT here is most often a scheduler the kernel lacks
                    raise RuntimeError(f"adding the virtual server {vs.key} (scheduler {vs.scheduler}): {e}") from None
        for vs in plan.update_services:
            await self.ipvs.service("set", service=service_record(vs))
        for vs, rs in plan.delete_dests:
            await self._dest("del", vs, rs)
            terminating.pop(termination_key(vs, rs), None)
        for vs, rs in plan.add_dests:
            await self._dest("add", vs, rs)
        for vs, rs in plan.reweight_dests:
            await self._dest("set", vs, rs)
        live: dict[str, dict[RealServer, Dest]] = {}
        for vs, rs in plan.retire_dests:
            if vs.key not in live:  # the connection counts now, not as of the last full read
                live[vs.key] = await self.dests(vs)
            dest = live[vs.key].get(rs)
            if dest is None:
                continue
            if deletable(vs, dest):
                await self._dest("del", vs, rs)
            else:
                await self._dest("set", vs, rs, weight=0)
                terminating[termination_key(vs, rs)] = (vs, rs)
                log.debug("Real server drains before it is deleted", service=vs.key, endpoint=str(rs))
        for vs in plan.delete_services:
            try:
                await self.ipvs.service("del", service=service_record(vs))
            except NetlinkError as e:
                _ignore(e, errno.ENOENT, errno.ESRCH)
            for key in [k for k in terminating if k.startswith(vs.key + "/")]:
                del terminating[key]

    async def refresh(self, state: Kernel, done: Plan) -> Kernel:
        """`state` after `done`: the virtual servers it touched read again, the deleted ones
        dropped (a partial sync's next diff starts from this, without dumping everything)."""
        out = dict(state)
        touched = {vs.key: vs for vs in (*done.add_services, *done.update_services)}
        for vs, _ in (*done.add_dests, *done.delete_dests, *done.reweight_dests, *done.retire_dests):
            touched.setdefault(vs.key, vs)
        for key, vs in touched.items():
            out[key] = KernelService(vs, await self.dests(vs))
        for vs in done.delete_services:
            out.pop(vs.key, None)
        return out

    async def delete_dest(self, vs: VirtualServer, rs: RealServer) -> None:
        await self._dest("del", vs, rs)


# --- kube-ipvs0 and the node's addresses (rtnetlink)

async def ensure_dummy(ipr: AsyncIPRoute) -> int:
    """kube-ipvs0's index; created (type dummy, left down, as kube-proxy does) if missing."""
    found = await ipr.link_lookup(ifname=DUMMY_DEVICE)
    if not found:
        try:
            await ipr.link("add", ifname=DUMMY_DEVICE, kind="dummy")
        except NetlinkError as e:
            _ignore(e, errno.EEXIST)
        found = await ipr.link_lookup(ifname=DUMMY_DEVICE)
    return found[0]


async def addresses(ipr: AsyncIPRoute) -> tuple[set[str], list[str]]:
    """(kube-ipvs0's IPv4 addresses, every other non-loopback IPv4 address of the node)."""
    dummy = set(await ipr.link_lookup(ifname=DUMMY_DEVICE))
    bound, others = set(), set()
    async for msg in await ipr.addr("dump", family=socket.AF_INET):
        address = msg.get("address")
        if not address or address.startswith("127."):
            continue
        (bound if msg.get("index") in dummy else others).add(address)
    return bound, sorted(others)


async def bind(ipr: AsyncIPRoute, index: int, address: str) -> None:
    try:
        await ipr.addr("add", index=index, address=address, prefixlen=32)
    except NetlinkError as e:
        _ignore(e, errno.EEXIST)


async def unbind(ipr: AsyncIPRoute, index: int, address: str) -> None:
    try:
        await ipr.addr("del", index=index, address=address, prefixlen=32)
    except NetlinkError as e:
        _ignore(e, errno.EADDRNOTAVAIL, errno.ENXIO, errno.ENOENT)


async def delete_dummy() -> bool:
    """Remove kube-ipvs0 (and so its addresses); whether it was there."""
    async with AsyncIPRoute() as ipr:
        found = await ipr.link_lookup(ifname=DUMMY_DEVICE)
        if not found:
            return False
        await ipr.link("del", index=found[0])
        return True
