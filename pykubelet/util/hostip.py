"""The node's primary IP: the first address of the interface that holds the default route."""

from __future__ import annotations

from pykubelet.util.netlink import AsyncIPRoute


async def default_route_ip() -> str:
    """The kubelet's fallback for the node IP without --node-ip; "" if there is no default route."""
    async with AsyncIPRoute() as ipr:
        async for route in await ipr.route("dump", family=2, table=254, dst_len=0):
            oif = route.get("oif")
            if oif is None:
                continue
            async for addr in await ipr.addr("dump", family=2, index=oif):
                return addr.get("address")
    return ""
