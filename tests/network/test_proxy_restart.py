"""A restarted `pykubelet proxy` keeps established connections, in both modes: real netfilter.

Three network namespaces: a client, a node (the proxy's rules; it routes between the two others)
and a server. A connection to a Service IP, DNATed by the node to the server, carries a line
every 50 ms; meanwhile the node gets what a proxy killed and started again writes first (the
other mode's leftovers removed, then a full sync from nothing, a Service gone meanwhile and a new
one). The connection must not break and must go on carrying data after that sync. The
namespaces go at the end, and every rule with them.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import sys
import time

import pytest

from tests.network.conftest import run_in

MODES = ("iptables", "nftables")
REPO = pathlib.Path(__file__).resolve().parents[2]


async def program(ns: str, *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec("nsenter", f"--net={ns}", "--", sys.executable, "-m",
                                                "tests.network.proxy_programs", *args, cwd=REPO,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)


async def wire(client: str, node: str, server: str) -> None:
    """client 10.199.1.2 - node 10.199.1.1 | 10.199.2.1 - server 10.199.2.2."""
    for peer, ns, node_ip, peer_ip in ((client, "c", "10.199.1.1", "10.199.1.2"), (server, "s", "10.199.2.1", "10.199.2.2")):
        await run_in(None, "ip", "link", "add", f"pklpx{ns}0", "netns", peer, "type", "veth", "peer", "name",
                     f"pklpxn{ns}", "netns", node)
        await run_in(peer, "ip", "addr", "add", f"{peer_ip}/24", "dev", f"pklpx{ns}0")
        await run_in(peer, "ip", "link", "set", f"pklpx{ns}0", "up")
        await run_in(peer, "ip", "route", "add", "default", "via", node_ip)
        await run_in(node, "ip", "addr", "add", f"{node_ip}/24", "dev", f"pklpxn{ns}")
        await run_in(node, "ip", "link", "set", f"pklpxn{ns}", "up")
    await run_in(node, "sysctl", "-qw", "net.ipv4.ip_forward=1")


@pytest.mark.parametrize("mode", MODES)
async def test_a_restarted_proxys_first_sync_keeps_established_connections(make_netns, mode):
    client, node, server = await make_netns("client"), await make_netns("node"), await make_netns("server")
    await wire(client, node, server)
    await run_in(node, sys.executable, "-m", "tests.network.proxy_programs", "sync", mode, "stream,gone")
    serving = await program(server, "serve", "20")
    try:
        assert serving.stdout is not None
        assert await asyncio.wait_for(serving.stdout.readline(), 30) == b"listening\n"
        listening = await program(client, "listen", "6")
        await asyncio.sleep(2)  # the connection is established and carrying data
        # The restart: "gone" was deleted while no proxy ran, "late" created.
        await run_in(node, sys.executable, "-m", "tests.network.proxy_programs", "sync", mode, "stream,late")
        synced = time.time()
        out, err = await asyncio.wait_for(listening.communicate(), 30)
        assert listening.returncode == 0, err.decode()
        result = json.loads(out)
    finally:
        serving.kill()
        await serving.wait()
    assert result["broke"] is None, f"the connection broke across the restarted proxy's first sync: {result['broke']}"
    before = [t for t in result["arrivals"] if t < synced]
    after = [t for t in result["arrivals"] if t >= synced]
    assert before and len(after) >= 10, f"{len(before)} lines before the sync, {len(after)} after"
    # The restart's sync also converged: the Service deleted meanwhile is gone, the new one there.
    rules = (await run_in(node, "iptables-save") if mode == "iptables"
             else await run_in(node, "nft", "list", "table", "ip", "kube-proxy"))
    assert "ns/late" in rules and "ns/gone" not in rules
