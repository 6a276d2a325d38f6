"""rtnetlink in another network namespace, without forking.

pyroute2's own netns support forks a child to open the socket; in this process a forked child
shares asyncio's signal wake-up fd, so its exit can look like a SIGTERM to the agent. A netns
is per thread, though: a worker thread enters the namespace, opens the socket (which stays
bound to that namespace), and goes back before it returns.
"""

from __future__ import annotations

import asyncio
import os
import socket

from pykubelet.util.netlink import AsyncIPRoute, setns

NETLINK_ROUTE = 0


def _netlink_socket_in(path: str) -> socket.socket:
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(path, os.O_RDONLY)
        try:
            setns(target)
            try:
                return socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_ROUTE)
            finally:
                setns(own)
        finally:
            os.close(target)
    finally:
        os.close(own)


async def iproute(netns_path: str = "") -> AsyncIPRoute:
    """An AsyncIPRoute for the netns at this path ("" = ours); use it as `async with`."""
    if not netns_path:
        return AsyncIPRoute()
    sock = await asyncio.to_thread(_netlink_socket_in, netns_path)
    return AsyncIPRoute(fileno=sock.detach())
