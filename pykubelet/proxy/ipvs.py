"""The IPVS mode (kube-proxy's `--proxy-mode ipvs`): the kernel's IP Virtual Server balances,
iptables only masquerades and filters.

Each sync computes the whole desired state (ipvs_state.py: virtual servers, real servers, the
kube-ipvs0 addresses, ipset members; ipvs_rules.py: the iptables batch) and changes the kernel
by the difference (ipvs_diff.py). A full sync (the first, after a failure, periodically) reads
the kernel's virtual servers, ipsets and addresses; a partial one trusts what the last sync
left. The order keeps packets flowing: ipsets and virtual servers first, then the addresses that
make the VIPs local, the rules, and last what is gone. Real servers removed with connections
still open drain at weight 0 and are deleted once idle (checked every minute, at a sync).

IPVS, the dummy interface and the ipsets are netlink (pyroute2); the rules one
`iptables-restore --noflush`. IPv4 only, like the rest of the proxy.
"""

from __future__ import annotations

import asyncio
import os
import platform
import time

from pyroute2 import AsyncIPRoute
from pyroute2.netlink.exceptions import NetlinkError

from pykubelet.proxy import ipvs_ipsets, ipvs_kernel, ipvs_rules, metrics
from pykubelet.proxy.commands import CommandFailed, run
from pykubelet.proxy.iptables import RESTORE, has_jump, tables
from pykubelet.proxy.ipvs_diff import Kernel, KernelService, Pair, Plan, address_changes, graceful_check, plan
from pykubelet.proxy.ipvs_state import DUMMY_DEVICE, DesiredState, IpvsSettings, PortResult, desired_state
from pykubelet.proxy.model import ServicePort, ServicePortName
from pykubelet.util.log import get_logger

log = get_logger(__name__)

GRACEFUL_CHECK_INTERVAL = 60.0  # kube-proxy's rsCheckDeleteInterval
SYSCTL = "/proc/sys/net"
# kube-proxy's sysctls for IPVS: conntrack for the masquerading, expire connections whose real
# server is gone (and persistence templates of quiesced ones), forward to the endpoints.
SYSCTLS = {"ipv4/vs/conntrack": "1", "ipv4/vs/expire_nodest_conn": "1", "ipv4/vs/expire_quiescent_template": "1",
           "ipv4/ip_forward": "1"}
STRICT_ARP = {"ipv4/conf/all/arp_ignore": "1", "ipv4/conf/all/arp_announce": "2"}
# conn_reuse_mode=0 works around an IPVS bug of kernels 4.1 to 5.8; later ones are left as they are.
CONN_REUSE = "ipv4/vs/conn_reuse_mode"


class SyncFailed(RuntimeError):
    pass


def sysctls(strict_arp: bool, kernel: str) -> dict[str, str]:
    """The sysctls to set for a kernel release string."""
    out = dict(SYSCTLS)
    if strict_arp:
        out.update(STRICT_ARP)
    try:
        version = tuple(int(p) for p in kernel.split("-")[0].split(".")[:2])
    except ValueError:
        version = (0, 0)
    if (4, 1) <= version < (5, 9):
        out[CONN_REUSE] = "0"
    return out


def _write_sysctls(values: dict[str, str]) -> None:
    for name, value in values.items():
        path = os.path.join(SYSCTL, name)
        with open(path, encoding="ascii") as f:
            if f.read().strip() == value:
                continue
        log.info("Setting a sysctl for IPVS", sysctl=name.replace("/", "."), value=value)
        with open(path, "w", encoding="ascii") as f:
            f.write(value)


class IpvsBackend:
    mode = "ipvs"

    def __init__(self, settings: IpvsSettings, strict_arp: bool = False):
        self.settings = settings
        self.strict_arp = strict_arp
        self.kernel = ipvs_kernel.IpvsKernel()
        self._ready = False
        self._first = True
        self._state: Kernel = {}
        self._members: dict[str, set[str]] | None = None
        self._rules_text = ""
        self.terminating: dict[str, Pair] = {}
        self._checked = time.monotonic()

    async def prepare(self) -> None:
        """IPVS reachable (ip_vs loaded), kube-ipvs0 there and kube-proxy's sysctls set, once: at
        start-up, so that a node that cannot do IPVS says so at once (as kube-proxy refuses to
        start), and again after a failure."""
        if self._ready:
            return
        await self.kernel.open()
        await self.kernel.check_scheduler(self.settings.scheduler)
        try:
            async with AsyncIPRoute() as ipr:
                await ipvs_kernel.ensure_dummy(ipr)
        except NetlinkError as e:
            raise RuntimeError(f"cannot create the {DUMMY_DEVICE} dummy interface (no dummy link type in this "
                               f"kernel?): {e}") from None
        await asyncio.to_thread(_write_sysctls, sysctls(self.strict_arp, platform.release()))
        self._ready = True

    async def sync(self, ports: dict[ServicePortName, ServicePort], changed: set[ServicePortName] | None,
                   large: bool) -> dict[ServicePortName, PortResult]:
        full = changed is None
        try:
            await self.prepare()
            return await self._sync(ports, full)
        except Exception as e:  # noqa: BLE001 - commands, I/O and pyroute2's netlink errors alike
            self._members, self._state = None, {}  # unknown now: the next sync is a full one
            self._ready = False  # and opens IPVS afresh, in case its socket is what broke
            self.kernel.close()
            raise SyncFailed(str(e) if isinstance(e, (CommandFailed, RuntimeError)) else f"{type(e).__name__}: {e}"
                             ) from None

    async def _sync(self, ports: dict[ServicePortName, ServicePort], full: bool) -> dict[ServicePortName, PortResult]:
        s = self.settings
        async with AsyncIPRoute() as ipr:
            index = await ipvs_kernel.ensure_dummy(ipr)
            bound, node_addresses = await ipvs_kernel.addresses(ipr)
            want = desired_state(ports, s, node_addresses)
            self._members = await ipvs_ipsets.sync(want.members, None if full else self._members)
            state = await self.kernel.read() if full else self._state
            changes = plan(want, state, set(self.terminating), self._first, s.exclude_cidrs)
            gone = Plan(delete_services=changes.delete_services)  # last: after the rules stop naming them
            changes.delete_services = []
            await self.kernel.apply(changes, self.terminating)
            add, remove = address_changes(want.bound, bound)
            for address in add:
                await ipvs_kernel.bind(ipr, index, address)
            await self._restore_rules(want, full)
            for address in remove:
                await ipvs_kernel.unbind(ipr, index, address)
            await self.kernel.apply(gone, self.terminating)
        changes.delete_services = gone.delete_services
        self._state = await self.kernel.refresh(state, changes)
        self._first = False
        if time.monotonic() - self._checked >= GRACEFUL_CHECK_INTERVAL:
            await self._graceful_check()
        if add or remove or gone.delete_services:
            log.info("Updated the IPVS Service addresses", added=len(add), removed=len(remove),
                     virtualServersDeleted=len(gone.delete_services))
        return want.results

    async def _restore_rules(self, want: DesiredState, full: bool) -> None:
        missing: list = []
        if full:
            saved = tables(await run("iptables-save"))
            missing = [j for j in ipvs_rules.JUMPS if not has_jump(saved.get(j.table, []), j)]
        rules = ipvs_rules.restore_text(want, self.settings, [])
        if not full and rules == self._rules_text:
            return  # a partial sync that changed no set's emptiness nor a firewall entry
        try:
            await run(*RESTORE, stdin=ipvs_rules.restore_text(want, self.settings, missing) if missing else rules)
        except CommandFailed:
            metrics.IPTABLES_RESTORE_FAILURES.labels(metrics.IP_FAMILY).inc()
            self._rules_text = ""
            raise
        self._rules_text = rules

    async def _graceful_check(self) -> None:
        """Delete the drained real servers whose connections are all gone."""
        self._checked = time.monotonic()
        services = {vs.key: vs for vs, _ in self.terminating.values()}
        live: Kernel = {}
        for key, vs in services.items():
            try:
                live[key] = KernelService(vs, await self.kernel.dests(vs))
            except NetlinkError:
                continue  # its virtual server went meanwhile: nothing left to delete
        delete, drop = graceful_check(self.terminating, live)
        for vs, rs in delete:
            await self.kernel.delete_dest(vs, rs)
            if vs.key in self._state:
                self._state[vs.key].dests.pop(rs, None)
            log.info("Deleted a drained real server", service=vs.key, endpoint=str(rs))
        for key in drop:
            self.terminating.pop(key, None)

    async def lost_rules(self) -> bool:
        """kube-ipvs0 or our nat chain is gone (someone deleted the link or flushed the tables)."""
        async with AsyncIPRoute() as ipr:
            if not await ipr.link_lookup(ifname=DUMMY_DEVICE):
                return True
        try:
            await run("iptables", "-w", "5", "-t", "nat", "-S", ipvs_rules.SERVICES)
            return False
        except CommandFailed:
            return True


async def used() -> bool:
    """The IPVS mode ran here (kube-ipvs0 exists)."""
    async with AsyncIPRoute() as ipr:
        return bool(await ipr.link_lookup(ifname=DUMMY_DEVICE))


async def cleanup() -> bool:
    """Remove what the IPVS mode installed, in kube-proxy's order: every virtual server,
    kube-ipvs0, the chains (and the jumps to them), then the ipsets they matched."""
    from pykubelet.proxy import iptables

    removed = False
    if await asyncio.to_thread(os.path.exists, "/proc/net/ip_vs"):  # else ip_vs is not loaded: nothing to flush
        kernel = ipvs_kernel.IpvsKernel()
        await kernel.open()
        try:
            services = [k.service for k in (await kernel.read()).values()]
            await kernel.apply(Plan(delete_services=services), {})
            removed = bool(services)
        finally:
            kernel.close()
    removed = await ipvs_kernel.delete_dummy() or removed
    removed = await iptables.cleanup(ipvs_rules.CHAINS) or removed
    if await asyncio.to_thread(os.path.exists, "/sys/module/ip_set"):  # else there is no ipset at all
        removed = bool(await ipvs_ipsets.destroy()) or removed
    return removed
