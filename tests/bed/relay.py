"""A TCP relay between network namespaces: it listens inside one and connects out from its own.

The test control plane listens on the machine's loopback only. A node of the multi-node test bed
is a network namespace; to reach the apiserver the way a real node reaches its control plane
(over the LAN, at the address the apiserver advertises), the LAN gets that address and this relay
answers on it, forwarding each connection to 127.0.0.1:6443 in the machine's namespace.

    python -m tests.bed.relay --netns pkl-lan --listen 10.250.0.1:6443 --to 127.0.0.1:6443

It prints "ready" once it listens, and runs until killed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys

from pyroute2.netns import setns


def listener_in(netns: str, host: str, port: int) -> socket.socket:
    """A listening socket that lives in netns (sockets keep the namespace they were made in)."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(netns if "/" in netns else f"/var/run/netns/{netns}", os.O_RDONLY)
    try:
        setns(target)
        try:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(512)
            sock.setblocking(False)
            return sock
        finally:
            setns(own)
    finally:
        os.close(own)
        os.close(target)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            writer.close()
        except OSError:
            pass


async def relay(sock: socket.socket, to_host: str, to_port: int) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(to_host, to_port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    server = await asyncio.start_server(handle, sock=sock)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--netns", required=True, help="name (as `ip netns` knows it) or path of the namespace to listen in")
    p.add_argument("--listen", required=True, help="host:port inside that namespace")
    p.add_argument("--to", required=True, help="host:port to connect to from this process's namespace")
    args = p.parse_args()
    host, _, port = args.listen.rpartition(":")
    to_host, _, to_port = args.to.rpartition(":")
    sock = listener_in(args.netns, host, int(port))
    asyncio.run(relay(sock, to_host, int(to_port)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
