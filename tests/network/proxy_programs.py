"""The programs tests/network/test_proxy_restart.py runs inside its network namespaces, each as
`python -m tests.network.proxy_programs ROLE ...` under nsenter (a netns is per process)."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import threading
import time

from pykubelet.proxy import iptables, iptables_rules, nftables, nftables_rules
from pykubelet.proxy.model import Endpoint, ServiceName, ServicePort, ServicePortName

STREAM_IP, SERVER_IP, SERVER_PORT = "10.99.0.10", "10.199.2.2", 8080
CLUSTER_CIDR, NODE_IP = "10.199.0.0/16", "10.199.1.1"


async def sync(mode: str, services: list[str]) -> None:
    """What a (re)started proxy does first: remove the other mode's rules, then one full sync by a
    backend that knows nothing yet. `stream` is the Service the client talks to."""
    ports = {}
    for i, name in enumerate(services):
        ip = STREAM_IP if name == "stream" else f"10.99.0.{20 + i}"
        port = ServicePort(ServicePortName(ServiceName("ns", name), "", "TCP"), ip, 80,
                           endpoints=(Endpoint(SERVER_IP, SERVER_PORT, False, True, True, False),))
        ports[port.name] = port
    backend: iptables.IptablesBackend | nftables.NftablesBackend
    if mode == "iptables":
        await nftables.cleanup()
        backend = iptables.IptablesBackend(iptables_rules.RuleSettings(cluster_cidrs=(CLUSTER_CIDR,), node_ip=NODE_IP))
    else:
        await iptables.cleanup()
        backend = nftables.NftablesBackend(nftables_rules.RuleSettings(cluster_cidrs=(CLUSTER_CIDR,), node_ip=NODE_IP))
    await backend.sync(ports, None, False)


def serve(seconds: float) -> None:
    """A line every 50 ms to each client, for `seconds`; says "listening" once it is."""
    listener = socket.create_server(("0.0.0.0", SERVER_PORT))
    listener.settimeout(0.5)
    print("listening", flush=True)

    def stream(conn: socket.socket) -> None:
        try:
            while True:
                conn.sendall(b"tick\n")
                time.sleep(0.05)
        except OSError:
            pass
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            conn, _ = listener.accept()
        except socket.timeout:
            continue
        threading.Thread(target=stream, args=(conn,), daemon=True).start()


def listen(seconds: float) -> None:
    """One connection to the Service for `seconds`; prints JSON: each line's arrival (wall clock)
    and how the connection ended early, if it did."""
    arrivals: list[float] = []
    broke = None
    try:
        with socket.create_connection((STREAM_IP, 80), timeout=5) as conn:
            reader = conn.makefile("rb")
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                if not reader.readline():
                    broke = "closed by the other end"
                    break
                arrivals.append(time.time())
    except OSError as e:
        broke = str(e)
    print(json.dumps({"arrivals": arrivals, "broke": broke}))


if __name__ == "__main__":
    role, *args = sys.argv[1:]
    if role == "sync":
        asyncio.run(sync(args[0], args[1].split(",")))
    elif role == "serve":
        serve(float(args[0]))
    else:
        listen(float(args[0]))
