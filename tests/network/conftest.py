"""Network namespaces for tests that run the real CNI plugins (/usr/lib/cni).

Each test gets a "node" netns (where the plugins run: bridge, iptables rules) and makes "pod"
netns on demand; all are deleted afterwards, which also removes every bridge, veth and
iptables rule the plugins made in them. Host-local keeps its IP files under tmp_path.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import secrets
import sys
from dataclasses import dataclass

import pytest
from pyroute2 import AsyncIPRoute, netns

CNI_BIN = "/usr/lib/cni"


@dataclass(frozen=True)
class Link:
    name: str
    up: bool
    addresses: tuple[ipaddress.IPv4Interface, ...]


async def links(ns: str | None) -> dict[str, Link]:
    """The interfaces of netns `ns` (a path; None: ours) with their IPv4 addresses."""
    kwargs = {"netns": ns} if ns else {}
    async with AsyncIPRoute(**kwargs) as ipr:
        # One dump at a time on a netlink socket: links first, then all addresses.
        raw_links = [link async for link in await ipr.link("dump")]
        addresses: dict[int, list] = {}
        async for addr in await ipr.addr("dump", family=2):
            addresses.setdefault(addr["index"], []).append(
                ipaddress.ip_interface(f"{addr.get('address')}/{addr['prefixlen']}"))
    return {link.get("ifname"): Link(link.get("ifname"), bool(link["flags"] & 1),
                                     tuple(addresses.get(link["index"], ())))
            for link in raw_links}


async def default_gateway(ns: str) -> str | None:
    async with AsyncIPRoute(netns=ns) as ipr:
        async for route in await ipr.route("dump", family=2, table=254):
            if route["dst_len"] == 0:
                return route.get("gateway")
    return None


async def delete_link(ns: str | None, name: str) -> None:
    kwargs = {"netns": ns} if ns else {}
    async with AsyncIPRoute(**kwargs) as ipr:
        index = await ipr.link_lookup(ifname=name)
        if index:
            await ipr.link("del", index=index[0])


async def set_link_state(ns: str, name: str, state: str) -> None:
    async with AsyncIPRoute(netns=ns) as ipr:
        await ipr.link("set", index=(await ipr.link_lookup(ifname=name))[0], state=state)


async def run_in(ns: str | None, *argv: str, timeout: float = 20) -> str:
    """Run a command inside netns `ns`; its stdout, or AssertionError with its stderr."""
    full = ["nsenter", f"--net={ns}", "--", *argv] if ns else list(argv)
    proc = await asyncio.create_subprocess_exec(*full, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"{argv} in {ns} did not finish in {timeout}s") from None
    assert proc.returncode == 0, f"{argv} in {ns} failed ({proc.returncode}): {err.decode()}"
    return out.decode()


async def iptables_nat(ns: str | None) -> str:
    return await run_in(ns, "iptables-save", "-t", "nat")


@pytest.fixture
def unique() -> str:
    return secrets.token_hex(3)


@pytest.fixture
async def make_netns(unique):
    created: list[str] = []

    async def make(role: str) -> str:
        name = f"pkltcni-{unique}-{role}"
        # pyroute2 creates the netns in a helper process: keep it off the event loop.
        await asyncio.to_thread(netns.create, name)
        created.append(name)
        path = f"/run/netns/{name}"
        async with AsyncIPRoute(netns=path) as ipr:
            await ipr.link("set", index=(await ipr.link_lookup(ifname="lo"))[0], state="up")
        return path

    yield make
    for name in reversed(created):
        await asyncio.to_thread(netns.remove, name)


@pytest.fixture
async def node(make_netns) -> str:
    """A netns standing for a node: the plugins run in it."""
    return await make_netns("node")


@pytest.fixture
def subnet() -> ipaddress.IPv4Network:
    # Private to the node netns, so any /24 of 10.199/16 is free there.
    return ipaddress.ip_network(f"10.199.{secrets.randbelow(254) + 1}.0/24")


@pytest.fixture
def python() -> str:
    return sys.executable


def pod_ip_files(data_dir: str) -> list[str]:
    """host-local's allocations: one file per IP under <dataDir>/<network>/."""
    found = []
    for _root, _dirs, files in os.walk(data_dir):
        for name in files:
            try:
                ipaddress.ip_address(name)
            except ValueError:
                continue  # "lock", "last_reserved_ip.0"
            found.append(name)
    return sorted(found)
