"""A TCP relay to the apiserver: it listens on an address the apiserver does not, and connects on.

The test control plane listens on the machine's loopback only, but advertises another address
(the `kubernetes` Service's endpoint, which may not be a loopback one). This relay answers there,
forwarding each connection to 127.0.0.1:6443:

- in the machine's own network namespace (tests/bed/cluster.sh `up`), so the pods of a node on
  this machine reach the apiserver; `--allow` then limits it to them and to the machine itself:

    python3 tests/bed/relay.py --listen 10.250.0.1:6443 --to 127.0.0.1:6443 --allow 10.244.0.0/16

- inside another namespace (`--netns`: the multi-node test bed's LAN), as a real control plane
  answers its nodes over their LAN (sockets keep the namespace they were made in):

    python -m tests.bed.relay --netns pkl-lan --listen 10.250.0.1:6443 --to 127.0.0.1:6443

It prints "ready" once it listens, and runs until killed.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import socket
import sys
from typing import Sequence

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def listener(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(512)
    sock.setblocking(False)
    return sock


def listener_in(netns: str, host: str, port: int) -> socket.socket:
    """A listening socket that lives in netns."""
    from pyroute2.netns import setns  # only this mode needs it: `up` runs the relay with the system's python3

    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(netns if "/" in netns else f"/var/run/netns/{netns}", os.O_RDONLY)
    try:
        setns(target)
        try:
            return listener(host, port)
        finally:
            setns(own)
    finally:
        os.close(own)
        os.close(target)


def is_local(address: str) -> bool:
    """Is address one of this machine's own? The kernel routes to its own addresses from themselves:
    a UDP socket connected to one takes it as its source (connecting sends nothing)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((address, 9))
        except OSError:
            return False
        return probe.getsockname()[0] == address


def admitted(peer: str, allow: Sequence[Network]) -> bool:
    """With no --allow, every peer; else those in an allowed network, and this machine itself."""
    if not allow:
        return True
    address = ipaddress.ip_address(peer.removeprefix("::ffff:"))
    return any(address in net for net in allow if net.version == address.version) or is_local(str(address))


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy one direction; its end is passed on as a half-close, since a client that has sent its
    whole request (busybox nc does so at once) still waits for the answer coming the other way."""
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.transport.abort()  # a broken direction ends the other one too


async def relay(sock: socket.socket, to_host: str, to_port: int, allow: Sequence[Network] = ()) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        if not admitted(peer[0], allow):
            writer.close()  # not a pod of this machine, nor the machine: nothing beyond it gets in
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(to_host, to_port)
        except OSError:
            writer.close()
            return
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            up_writer.close()
            writer.close()

    server = await asyncio.start_server(handle, sock=sock)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--netns", help="name (as `ip netns` knows it) or path of the namespace to listen in "
                                   "(default: this process's own)")
    p.add_argument("--listen", required=True, help="host:port to listen on")
    p.add_argument("--to", required=True, help="host:port to connect to from this process's namespace")
    p.add_argument("--allow", action="append", default=[], type=ipaddress.ip_network, metavar="CIDR",
                   help="accept peers in this network (repeatable) and this machine's own addresses; "
                        "without it, every peer")
    args = p.parse_args()
    host, _, port = args.listen.rpartition(":")
    to_host, _, to_port = args.to.rpartition(":")
    sock = listener_in(args.netns, host, int(port)) if args.netns else listener(host, int(port))
    asyncio.run(relay(sock, to_host, int(to_port), args.allow))
    return 0


if __name__ == "__main__":
    sys.exit(main())
