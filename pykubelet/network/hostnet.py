"""The node's host network, which on a multi-node test bed is a network namespace of its own:
routes to other nodes' podCIDRs (host-gw) and the masquerade of pod traffic leaving the cluster."""

from __future__ import annotations

import asyncio
import ipaddress
import os
from typing import Any, Iterable

from pykubelet.config import NetworkSettings
from pykubelet.util.log import get_logger
from pykubelet.util.netlink import NetlinkError
from pykubelet.util.netns import iproute
from pykubelet.util.timeouts import within

log = get_logger(__name__)

# Our routes carry their own protocol number, so a restarted agent finds (and drops) the ones
# whose node is gone without touching anybody else's.
RTPROT_PYKUBELET = 0x70  # 112: not in iproute2's rt_protos
MASQ_CHAIN = "PYKUBELET-POSTROUTING"  # the default bridge's
DEFAULT_BRIDGE = NetworkSettings.bridge
MULTICAST = "224.0.0.0/4"
COMMAND_TIMEOUT = 30.0


def netns_path(netns: str) -> str:
    """A netns name (as `ip netns` knows it) or path; "" stays "" (the agent's own)."""
    return netns if not netns or "/" in netns else os.path.join("/var/run/netns", netns)


async def run_in(netns: str, *argv: str, stdin: bytes = b"") -> str:
    """Run a command in the host netns; its stdout. Raises RuntimeError with stderr on failure."""
    prefix = ("nsenter", f"--net={netns}") if netns else ()
    proc = await asyncio.create_subprocess_exec(*prefix, *argv, stdin=asyncio.subprocess.PIPE,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await within(proc.communicate(stdin), COMMAND_TIMEOUT)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        raise RuntimeError(f"{argv[0]} did not finish within {COMMAND_TIMEOUT:.0f}s") from None
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed (exit {proc.returncode}): {err.decode(errors='replace').strip()}")
    return out.decode()


def masquerade_chain(bridge: str) -> str:
    """The nat chain of one node's masquerade rules. Two nodes can share a host network (a second
    agent with its own bridge and podCIDR beside the machine's, as the conformance run does): each
    rewrites its whole chain, so each has its own. 28 characters at most (iptables' limit)."""
    return MASQ_CHAIN if bridge == DEFAULT_BRIDGE else f"PKL-MASQ-{bridge}"


def masquerade_rules(chain: str, cluster_cidrs: list[str]) -> str:
    """iptables-restore input that makes `chain` exactly: pod traffic stays unmasqueraded to
    every podCIDR of the cluster and to multicast, anything else is masqueraded."""
    lines = ["*nat", f":{chain} - [0:0]"]
    lines += [f"-A {chain} -d {cidr} -j RETURN" for cidr in sorted(cluster_cidrs)]
    lines += [f"-A {chain} -d {MULTICAST} -j RETURN", f"-A {chain} -j MASQUERADE", "COMMIT", ""]
    return "\n".join(lines)


class HostNetwork:
    def __init__(self, netns: str, bridge: str = DEFAULT_BRIDGE):
        self.netns = netns_path(netns)
        self.chain = masquerade_chain(bridge)
        self._routes: dict[str, str] | None = None
        self._unroutable: set[tuple[str, str]] = set()  # warned about once each
        self._masq: tuple[str, tuple[str, ...]] | None = None

    def forget(self) -> None:
        """The next syncs check and rewrite everything: what they last wrote may have been changed
        by someone else meanwhile (another network's agent, while the agent left it alone)."""
        self._routes = None
        self._masq = None

    async def sync_routes(self, routes: dict[str, str]) -> None:
        """Exactly these podCIDR -> node IP routes of ours in the main table (host-gw)."""
        if routes == self._routes:
            return
        async with await iproute(self.netns) as ipr:
            current = {}
            async for route in await ipr.route("dump", family=2, table=254, proto=RTPROT_PYKUBELET):
                current[f"{route.get('dst')}/{route['dst_len']}"] = route.get("gateway")
            for dst in current.keys() - routes.keys():
                await ipr.route("del", dst=dst, table=254, proto=RTPROT_PYKUBELET)
                log.info("Route to a node removed", podCIDR=dst)
            failed = False
            for dst, gateway in sorted(routes.items()):
                if current.get(dst) == gateway:
                    continue
                try:
                    await ipr.route("replace", dst=dst, gateway=gateway, table=254, proto=RTPROT_PYKUBELET)
                    log.info("Route to a node's pods", podCIDR=dst, via=gateway)
                except NetlinkError as e:
                    failed = True  # e.g. the node's IP is not on a directly connected network
                    if (dst, gateway) not in self._unroutable:
                        self._unroutable.add((dst, gateway))
                        log.warning("Cannot route to a node's pods", podCIDR=dst, via=gateway, err=e.args[-1])
        self._routes = None if failed else dict(routes)

    async def sync_masquerade(self, pod_cidr: str, cluster_cidrs: list[str]) -> None:
        """Pods' traffic to other pods keeps its source IP; anything else leaving the node is
        masqueraded (the bridge plugin's own ipMasq would hide pod IPs from other nodes too)."""
        key = (pod_cidr, tuple(sorted(cluster_cidrs)))
        if key == self._masq:
            return
        await run_in(self.netns, "iptables-restore", "--noflush",
                     stdin=masquerade_rules(self.chain, list(key[1])).encode())
        rule = ("POSTROUTING", "-s", pod_cidr, "-j", self.chain)
        try:
            await run_in(self.netns, "iptables", "-t", "nat", "-C", *rule)
        except RuntimeError:  # -C fails when the rule is missing
            await run_in(self.netns, "iptables", "-t", "nat", "-A", *rule)
        self._masq = key
        log.info("Pod traffic leaving the cluster is masqueraded", podCIDR=pod_cidr, clusterCIDRs=",".join(key[1]))


def node_route(node: dict) -> tuple[str, str] | None:
    """(podCIDR, InternalIP) of a Node object, IPv4 only; None while it has either missing."""
    spec, status = node.get("spec") or {}, node.get("status") or {}
    cidrs = [c for c in (spec.get("podCIDRs") or [spec.get("podCIDR")]) if c and ":" not in c]
    ips = [a.get("address") for a in status.get("addresses") or [] if a.get("type") == "InternalIP"]
    ips = [ip for ip in ips if ip and ":" not in ip]
    if not cidrs or not ips:
        return None
    try:
        return str(ipaddress.ip_network(cidrs[0])), str(ipaddress.ip_address(ips[0]))
    except ValueError:
        return None


def routes_to_other_nodes(own_name: str, own_node: dict[str, Any],
                          nodes: Iterable[dict[str, Any]]) -> tuple[dict[str, str], set[str]]:
    """(podCIDR -> InternalIP of every other node, every node's podCIDR)."""
    routes, cidrs = {}, set()
    own = node_route(own_node)
    for node in nodes:
        route = node_route(node)
        if route is None:
            continue
        cidrs.add(route[0])
        # A node on our own IP is this host under another name: no route leads there.
        if node["metadata"]["name"] != own_name and (own is None or route[1] != own[1]):
            routes[route[0]] = route[1]
    return routes, cidrs
