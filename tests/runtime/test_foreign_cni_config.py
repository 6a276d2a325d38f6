"""A CNI DaemonSet's config appearing on an agent-mode node (docs/network.md, "A CNI DaemonSet on
an agent-mode node"): the agent reports its network not ready naming the file, leaves the node's
routes alone (even across a restart), and is ready and routing again once the file is gone.

The node is the tests' own: a network namespace playing its host network, its own containerd
(tests/bed/containerd-node.sh) with its own CNI conf dir, and an agent in agent mode.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from typing import Any

import pytest

from tests.helpers import wait_for
from tests.runtime.conftest import AgentProcess

REPO = pathlib.Path(__file__).resolve().parents[2]
CONTAINERD_NODE = REPO / "tests" / "bed" / "containerd-node.sh"
NODE = "pkl-foreign"
LAN = "pklfx-lan"
OUR_ROUTE = "10.79.5.0/24"  # as the agent routes to another node's pods: protocol 112
THEIR_ROUTE = "10.79.6.0/24"  # as another network's agent routes
# kube-flannel.yml's cni-conf.json
FLANNEL = {"name": "cbr0", "cniVersion": "0.3.1", "plugins": [
    {"type": "flannel", "delegate": {"hairpinMode": True, "isDefaultGateway": True}},
    {"type": "portmap", "capabilities": {"portMappings": True}}]}


def sh(*argv: str) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"{' '.join(argv)} failed: {result.stderr.strip()}"
    return result.stdout


def routes() -> dict[str, str]:
    """The node's routes in the main table: destination -> protocol."""
    return {r["dst"]: str(r.get("protocol", "")) for r in json.loads(sh("ip", "-n", NODE, "-j", "route", "show"))}


@pytest.fixture
def node(tmp_path):
    """(the agent, not started; the node's CNI conf dir); everything removed afterwards."""
    subprocess.run(["ip", "netns", "del", NODE], capture_output=True)  # a killed run's leftover
    sh("ip", "netns", "add", NODE)
    agent = None
    try:
        state = pathlib.Path("/run/pykubelet-nodes") / NODE
        endpoint = sh("bash", str(CONTAINERD_NODE), "up", NODE, "--netns", NODE).strip().splitlines()[-1]
        # The node's LAN: a veth pair inside its netns (gone with it), so routes have a link to go by.
        sh("ip", "-n", NODE, "link", "add", LAN, "type", "veth", "peer", "name", f"{LAN}-peer")
        sh("ip", "-n", NODE, "addr", "add", "192.0.2.1/24", "dev", LAN)
        sh("ip", "-n", NODE, "link", "set", f"{LAN}-peer", "up")
        sh("ip", "-n", NODE, "link", "set", LAN, "up")
        (tmp_path / "manifests").mkdir()
        agent = AgentProcess(tmp_path, tmp_path / "manifests", "--network-mode", "agent", "--host-netns", NODE,
                             "--cni-conf-dir", str(state / "net.d"), "--cni-socket", str(state / "cni.sock"),
                             "--cni-bridge", "pklfx0", "--pod-cidr", "10.79.1.0/24", node=NODE, endpoint=endpoint,
                             network_state=None)
        yield agent, state / "net.d"
    finally:
        if agent is not None:
            agent.shutdown()
        subprocess.run(["bash", str(CONTAINERD_NODE), "down", NODE], capture_output=True, timeout=120)
        subprocess.run(["ip", "netns", "del", NODE], capture_output=True)


def network(agent: AgentProcess) -> dict[str, Any]:
    return (agent.local_get("/debug/agent") or {}).get("network") or {}


def doctor(agent: AgentProcess) -> tuple[int, list[dict[str, Any]]]:
    result = subprocess.run([sys.executable, "-m", "pykubelet.cli", "doctor", "-o", "json", "--root-dir",
                             str(agent.workdir / "root")], capture_output=True, text=True, timeout=60)
    assert result.returncode in (0, 1), f"doctor failed to run: {result.stderr}"
    return result.returncode, [c for c in json.loads(result.stdout)["checks"] if c["area"] == "Network"]


async def test_a_daemonsets_cni_config_makes_the_network_not_ready_and_leaves_the_routes_alone(node):
    agent, conf_dir = node
    agent.start()
    await wait_for(lambda: network(agent).get("ready"), 60, "the agent's network to be ready", describe=agent.describe)
    # One route as the agent makes them (to a node that is gone by now), one of another network.
    sh("ip", "-n", NODE, "route", "add", OUR_ROUTE, "via", "192.0.2.5", "proto", "112")
    sh("ip", "-n", NODE, "route", "add", THEIR_ROUTE, "via", "192.0.2.6", "dev", LAN, "onlink")

    flannel = conf_dir / "10-flannel.conflist"
    flannel.write_text(json.dumps(FLANNEL))
    state = await wait_for(lambda: (lambda n: n if n.get("ready") is False else None)(network(agent)), 30,
                           "the network to turn not ready", describe=agent.describe)
    assert state["problem"].startswith(f"another network's CNI config {flannel} is the one containerd uses")
    assert routes()[OUR_ROUTE] == "112" and THEIR_ROUTE in routes()

    code, checks = doctor(agent)
    assert code == 1
    assert any(c["status"] == "FAIL" and c["title"].startswith(f"{flannel} is the CNI config containerd uses")
               and c["evidence"][-1].startswith("fix: ") for c in checks), checks
    [error] = [line for line in agent.log().splitlines() if "Another network's CNI config" in line]  # said once
    assert error.startswith("E") and f'file="{flannel}"' in error and f'confDir="{conf_dir}"' in error
    assert "--network-mode runtime" in error

    # A restarted agent removes the routes of nodes that are gone; not while another network is in charge.
    agent.stop()
    agent.start()
    await wait_for(lambda: str(flannel) in network(agent).get("problem", ""), 60,
                   "the restarted agent to name the foreign config", describe=agent.describe)
    assert routes()[OUR_ROUTE] == "112" and THEIR_ROUTE in routes()

    flannel.unlink()
    await wait_for(lambda: network(agent).get("ready"), 30, "the network to be ready again", describe=agent.describe)
    assert network(agent)["problem"] == ""
    # Its routes are its own again: the one no node wants is gone; the other network's stays.
    assert OUR_ROUTE not in routes()
    assert THEIR_ROUTE in routes()
    _, checks = doctor(agent)
    assert any(c["status"] == "OK" and c["title"].startswith(f"CNI config {conf_dir}/10-pykubelet.conflist")
               for c in checks), checks
