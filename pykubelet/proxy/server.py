"""`pykubelet proxy`: the wiring. Settings -> the node's facts -> a backend -> watches -> syncs.

It runs in the node's network namespace (on a real node, the host's), as kube-proxy does, and
leaves its rules in place when it stops: Services keep working while it restarts, and the next
run takes the rules over (a full sync) and removes those of Services deleted meanwhile. Starting
in one mode removes what another mode left behind; `--cleanup` removes all three and exits.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import sys
from typing import Any

from pykubelet.kube import errors
from pykubelet.kube.reflector import Objects, Reflector
from pykubelet.proxy import iptables, iptables_rules, ipvs, ipvs_state, nftables, nftables_rules
from pykubelet.proxy.commands import CommandFailed, run
from pykubelet.proxy.config import MODES, ConfigError, ProxySettings, settings_from_args
from pykubelet.proxy.health import HealthState, health_app, metrics_app, serve
from pykubelet.proxy.inputs import SERVICES_QUERY, SLICES_QUERY, Inputs
from pykubelet.proxy.proxier import Backend, Proxier
from pykubelet.proxy.runner import SyncRunner
from pykubelet.util.log import get_logger, setup_logging
from pykubelet.util.tasks import Tasks, cancel_on_signals
from pykubelet.util.timeouts import within

log = get_logger("pykubelet.proxy")

EXIT_CONFIG = 2
NODE_WAIT = 30.0  # how long to wait for our Node when a setting needs its addresses or podCIDR
SYSCTL = "/proc/sys/net"


def _sysctl(name: str) -> str:
    try:
        with open(os.path.join(SYSCTL, name), encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return ""


def node_ip(node: dict[str, Any] | None, settings: ProxySettings) -> str:
    """The node's IPv4 address: its Node's InternalIP (else ExternalIP), else --bind-address."""
    addresses = ((node or {}).get("status") or {}).get("addresses") or []
    for kind in ("InternalIP", "ExternalIP"):
        for a in addresses:
            if a.get("type") == kind and ":" not in a.get("address", ""):
                return a["address"]
    return "" if ipaddress.ip_address(settings.bind_address).is_unspecified else settings.bind_address


async def local_addresses() -> list[str]:
    """This network namespace's IPv4 addresses."""
    from pyroute2 import AsyncIPRoute

    async with AsyncIPRoute() as ipr:
        return [a.get("address") async for a in await ipr.addr("dump", family=2)]


async def nodeport_ips(settings: ProxySettings, ip: str) -> tuple[str, ...] | None:
    """Where NodePorts answer: None for every local address, else the chosen ones."""
    if not settings.nodeport_addresses:
        return None
    if settings.nodeport_addresses == ["primary"]:
        return (ip,) if ip else ()
    nets = [ipaddress.ip_network(c) for c in settings.nodeport_addresses if ":" not in c]
    return tuple(a for a in await local_addresses() if any(ipaddress.ip_address(a) in n for n in nets))


async def make_backend(settings: ProxySettings, node: dict[str, Any] | None) -> Backend:
    ip = node_ip(node, settings)
    if settings.detect_local_mode == "NodeCIDR":
        spec = (node or {}).get("spec") or {}
        local = tuple(c for c in spec.get("podCIDRs") or [spec.get("podCIDR")] if c and ":" not in c)[:1]
    else:
        local = tuple(c for c in settings.cluster_cidrs if ":" not in c)[:1]
    if not local:
        log.warning("No cluster CIDR: traffic from outside the cluster to cluster IPs is not masqueraded "
                    "(set --cluster-cidr)")
    ports_at = await nodeport_ips(settings, ip)
    if settings.mode == "nftables":
        return nftables.NftablesBackend(nftables_rules.RuleSettings(
            settings.masquerade_bit, settings.masquerade_all, local, ip, ports_at))
    if settings.mode == "ipvs":
        log.warning("The ipvs proxy mode is deprecated in kube-proxy (since v1.35) and may be removed; "
                    "nftables is its successor")
        backend = ipvs.IpvsBackend(ipvs_state.IpvsSettings(
            settings.masquerade_bit, settings.masquerade_all, local, ip, ports_at, localhost_nodeports=False,
            random_fully=await _random_fully(), scheduler=settings.ipvs_scheduler or ipvs_state.DEFAULT_SCHEDULER,
            exclude_cidrs=tuple(settings.ipvs_exclude_cidrs)), strict_arp=settings.ipvs_strict_arp)
        await backend.prepare()  # no IPVS here: stop now, as kube-proxy does, not at every sync
        return backend
    loopback = ports_at is None or any(ipaddress.ip_address(a).is_loopback for a in ports_at)
    localhost = settings.localhost_nodeports and loopback
    if localhost and _sysctl("ipv4/conf/all/route_localnet") != "1":
        # NodePorts on 127.0.0.1 need it; KUBE-FIREWALL then drops what else it would let in.
        log.info("Setting route_localnet=1 to allow NodePorts on localhost (iptables.localhostNodePorts)")
        with open(os.path.join(SYSCTL, "ipv4/conf/all/route_localnet"), "w", encoding="ascii") as f:
            f.write("1")
    return iptables.IptablesBackend(iptables_rules.RuleSettings(
        settings.masquerade_bit, settings.masquerade_all, local, ip, ports_at, localhost,
        random_fully=await _random_fully(), conntrack_liberal=_sysctl("netfilter/nf_conntrack_tcp_be_liberal") == "1"))


async def _random_fully() -> bool:
    """MASQUERADE --random-fully exists since iptables 1.6.2."""
    try:
        version = (await run("iptables", "--version")).split()[1].lstrip("v")
        return tuple(int(p) for p in version.split(".")[:3]) >= (1, 6, 2)
    except (CommandFailed, IndexError, ValueError):
        return False


async def _was_here(mode: str) -> bool:
    """Whether `mode` left anything behind that another mode sharing its chains must remove: the
    iptables mode its canary chain, the IPVS mode kube-ipvs0. (Both use KUBE-SERVICES and
    friends, so a restart in one of them must not remove the chains as the other's.)"""
    if mode == "iptables":
        return await iptables.canary_present()
    return await ipvs.used()


async def clean_up(modes: tuple[str, ...], running: str = "") -> list[str]:
    """Remove what the given modes installed (before `running` starts, only what another mode
    left behind); the modes that had something."""
    removed = []
    for mode, cleanup in (("iptables", iptables.cleanup), ("ipvs", ipvs.cleanup), ("nftables", nftables.cleanup)):
        if mode not in modes:
            continue
        if running in ("iptables", "ipvs") and mode in ("iptables", "ipvs") and not await _was_here(mode):
            continue
        try:
            if await cleanup():
                removed.append(mode)
        except CommandFailed as e:
            if e.code == 127:  # the tool is not even installed: nothing of that mode can be here
                continue
            raise
    return removed


class ProxyServer:
    def __init__(self, settings: ProxySettings):
        self.settings = settings
        self.node: dict[str, Any] | None = None
        self._node_seen = asyncio.Event()

    def _on_node(self, nodes: Objects) -> None:
        self.node = next(iter(nodes.values()), None)
        if self.node is not None:
            self._node_seen.set()

    async def run(self) -> None:
        from pykubelet.kube.client import KubeClient

        s = self.settings
        if removed := await clean_up(tuple(m for m in MODES if m != s.mode), s.mode):
            log.info("Removed the rules another proxy mode left behind", modes=",".join(removed))
        kube = await KubeClient.from_kubeconfig(s.kubeconfig, s.qps, s.burst, user_agent="pykubelet-proxy")
        runners: list = []
        tasks = Tasks()
        try:
            node_query = {"fieldSelector": f"metadata.name={s.node_name}"}
            tasks.loop("node", Reflector(kube, "/api/v1/nodes", node_query, self._on_node, "own node").run())
            needs_node = s.detect_local_mode == "NodeCIDR" or s.nodeport_addresses == ["primary"]
            try:
                await within(self._node_seen.wait(), NODE_WAIT if needs_node else 2.0)
            except asyncio.TimeoutError:
                (log.warning if needs_node else log.info)("Our Node is not there (yet)", node=s.node_name)
            backend = await make_backend(s, self.node)
            health = HealthState(timeout=2 * s.sync_period, node=lambda: self.node)
            objects: dict[str, Reflector] = {}
            runner_ref: list[SyncRunner] = []

            def changed(_: Objects) -> None:
                health.queued()
                if runner_ref:
                    runner_ref[0].request()
            objects["services"] = Reflector(kube, "/api/v1/services", SERVICES_QUERY, changed, "services")
            objects["slices"] = Reflector(kube, "/apis/discovery.k8s.io/v1/endpointslices", SLICES_QUERY, changed,
                                          "endpointslices")
            proxier = Proxier(backend, Inputs(s.node_name), lambda: objects["services"].objects,
                              lambda: objects["slices"].objects,
                              lambda: all(r.ready.is_set() for r in objects.values()), health)
            runner = SyncRunner(proxier.sync, s.min_sync_period, s.sync_period)
            runner_ref.append(runner)
            health.updated()  # as kube-proxy: healthy from the start, until a sync waits too long
            if s.healthz_bind_address:
                runners.append(await serve(health_app(health), s.healthz_bind_address, "/healthz and /livez"))
            if s.metrics_bind_address:
                runners.append(await serve(metrics_app(health, s.mode), s.metrics_bind_address, "/metrics"))
            log.info("Proxying Services", mode=s.mode, node=s.node_name, nodeIP=node_ip(self.node, s) or "unknown",
                     clusterCIDR=",".join(s.cluster_cidrs) or "none", syncPeriod=s.sync_period,
                     minSyncPeriod=s.min_sync_period)
            for name, reflector in objects.items():
                tasks.loop(name, reflector.run())
            tasks.loop("sync", runner.run())
            raise await tasks.first_death()
        finally:
            await tasks.stop()
            for r in runners:
                await r.cleanup()
            await kube.close()


def _check_tools(mode: str) -> None:
    needed = ("nft",) if mode == "nftables" else ("iptables-save", "iptables-restore", "iptables")
    path = os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin").split(os.pathsep)
    for tool in needed:
        if not any(os.access(os.path.join(d, tool), os.X_OK) for d in path):
            package = "nftables" if mode == "nftables" else "iptables"
            raise ConfigError(f"{mode} mode needs {tool}, which is not installed (Debian: apt-get install {package})")


async def _serve(settings: ProxySettings) -> int:
    cancel_on_signals()
    try:
        await ProxyServer(settings).run()
    except asyncio.CancelledError:
        log.info("Proxy stopped by signal; its rules stay in place")
        return 0
    except (errors.KubeError, OSError, RuntimeError) as e:
        log.error("Proxy stopping", err=str(e))
        return 1
    return 0


def main(argv: list[str]) -> int:
    setup_logging(0)
    try:
        settings = settings_from_args(argv, lambda text: log.warning(text))
        if not settings.cleanup:
            _check_tools(settings.mode)
    except ConfigError as e:
        print(f"pykubelet proxy: invalid configuration: {e}", file=sys.stderr)
        return EXIT_CONFIG
    setup_logging(settings.verbosity)
    if settings.cleanup:
        try:
            removed = asyncio.run(clean_up(MODES))
        except CommandFailed as e:
            print(f"pykubelet proxy: cleanup failed: {e}", file=sys.stderr)
            return 1
        print(f"removed the rules of: {', '.join(removed)}" if removed else "nothing to remove")
        return 0
    return asyncio.run(_serve(settings))
