"""Multi-node tests: several nodes on one machine, joined to the test control plane.

A node is a network namespace (its host network, with eth0 on a shared LAN: a bridge in a
namespace of its own), its own containerd running in that namespace, and its own pykubelet.
The agent itself stays in the machine's namespace, where the apiserver listens on loopback,
and is told which namespace is its node's host network (--host-netns).

The control plane also has an address on the LAN, the one the apiserver advertises (so the
`kubernetes` Service leads there): a relay (tests/bed/relay.py) answers on it for the apiserver,
as a real control plane answers its nodes and their pods.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import pathlib
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import pytest

from pykubelet.cri.client import CRIClient
from tests.cluster.conftest import (REPO, cluster, cluster_sh, kubectl, kubectl_json,  # noqa: F401 (fixtures)
                                    namespace, node_condition)
from tests.helpers import run_to_completion, unmount_under, wait_for
from tests.runtime.conftest import AgentProcess

LAN_NS = "pkl-lan"
LAN_BRIDGE = "lan0"
CONTROL_PLANE_IP = os.environ.get("PYKUBELET_API_ADVERTISE_ADDRESS", "10.250.0.1")  # tests/bed/cluster.sh
API_PORT = os.environ.get("PYKUBELET_API_PORT", "6443")
CONTAINERD_NODE = REPO / "tests" / "bed" / "containerd-node.sh"


def sh(*argv: str) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"{' '.join(argv)} failed: {result.stderr.strip()}"
    return result.stdout


def in_netns(netns: str, *argv: str, timeout: float = 5) -> subprocess.CompletedProcess[str]:
    """argv run in a node's host network; a hung command counts as a failed one."""
    try:
        return subprocess.run(["ip", "netns", "exec", netns, *argv], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(e.cmd, 124, "", "timed out")


def netns_exists(name: str) -> bool:
    return pathlib.Path("/var/run/netns", name).exists()


@dataclass
class Node:
    name: str
    ip: str
    mode: str
    agent: AgentProcess

    @property
    def endpoint(self) -> str:
        return f"unix:///run/pykubelet-nodes/{self.name}/containerd.sock"

    @property
    def state_dir(self) -> pathlib.Path:
        return pathlib.Path("/run/pykubelet-nodes") / self.name

    @property
    def ipam_dir(self) -> pathlib.Path:
        """host-local's reservations (both modes use the agent's conflist, dataDir under its root)."""
        return self.agent.workdir / "root" / "network" / "ipam" / "pykubelet"

    def reserved_ips(self) -> set[str]:
        if not self.ipam_dir.is_dir():
            return set()
        return {p.name for p in self.ipam_dir.iterdir() if _is_ip(p.name)}

    def pod_cidr(self) -> str:
        return kubectl_json("get", "node", self.name)["spec"].get("podCIDR", "")

    def ready(self) -> dict[str, Any]:
        result = kubectl("get", "node", self.name, "-o", "json", check=False)
        return node_condition(json.loads(result.stdout) if result.returncode == 0 else None)

    def describe(self) -> str:
        return f"--- node {self.name} Ready condition ---\n{self.ready()}\n{self.agent.describe()}"

    def cri(self) -> CRIClient:
        return CRIClient(self.endpoint)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False


def lan_up() -> None:
    if not netns_exists(LAN_NS):
        sh("ip", "netns", "add", LAN_NS)
        sh("ip", "-n", LAN_NS, "link", "add", LAN_BRIDGE, "type", "bridge")
        sh("ip", "-n", LAN_NS, "link", "set", LAN_BRIDGE, "up")


def host_network_up(netns: str, ip: str) -> None:
    """The node's host network: its own namespace, eth0 on the LAN with the node's IP."""
    if netns_exists(netns):
        host_network_down(netns)
    sh("ip", "netns", "add", netns)
    port = f"p-{netns}"[:15]
    sh("ip", "link", "add", port, "netns", LAN_NS, "type", "veth", "peer", "name", "eth0", "netns", netns)
    sh("ip", "-n", LAN_NS, "link", "set", port, "master", LAN_BRIDGE, "up")
    sh("ip", "-n", netns, "addr", "add", f"{ip}/24", "dev", "eth0")
    sh("ip", "-n", netns, "link", "set", "eth0", "up")
    sh("ip", "-n", netns, "link", "set", "lo", "up")


def host_network_down(netns: str) -> None:
    subprocess.run(["ip", "netns", "del", netns], capture_output=True)


def apiserver_on_lan() -> subprocess.Popen[str]:
    """The control plane's LAN address, with a relay to the apiserver behind it; ready on return."""
    sh("ip", "-n", LAN_NS, "addr", "replace", f"{CONTROL_PLANE_IP}/24", "dev", LAN_BRIDGE)
    relay = subprocess.Popen([sys.executable, "-m", "tests.bed.relay", "--netns", LAN_NS, "--listen",
                              f"{CONTROL_PLANE_IP}:{API_PORT}", "--to", f"127.0.0.1:{API_PORT}"],
                             cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert relay.stdout is not None and relay.stdout.readline().strip() == "ready", "the apiserver relay did not start"
    return relay


@pytest.fixture(scope="session")
def lan():
    lan_up()
    relay = apiserver_on_lan()
    yield LAN_NS
    relay.kill()
    relay.wait()
    subprocess.run(["ip", "netns", "del", LAN_NS], capture_output=True)


def start_node(name: str, ip: str, mode: str, workdir: pathlib.Path, *extra: str,
               write_config: bool = True) -> Node:
    host_network_up(name, ip)
    subprocess.run(["bash", str(CONTAINERD_NODE), "down", name], capture_output=True, timeout=120)
    sh("bash", str(CONTAINERD_NODE), "up", name, "--netns", name)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "manifests").mkdir(exist_ok=True)
    kubeconfig = workdir / "node.kubeconfig"
    cluster_sh("node-kubeconfig", name, str(kubeconfig), timeout=60)
    state = pathlib.Path("/run/pykubelet-nodes") / name
    flags = ["--kubeconfig", str(kubeconfig), "--node-ip", ip, "--host-netns", name,
             "--cni-conf-dir", str(state / "net.d"), "--cni-socket", str(state / "cni.sock"),
             "--network-mode", mode]
    if mode == "runtime":
        flags += ["--cni-write-config", "true" if write_config else "false"]
    agent = AgentProcess(workdir, workdir / "manifests", *flags, *extra, node=name,
                         endpoint=f"unix://{state}/containerd.sock", network_state=None)  # a fresh node
    return Node(name, ip, mode, agent.start())


def drain(node: Node) -> None:
    """Remove the node's pods the way they go on a real node — through the apiserver and its
    agent, which releases their network, cgroups and directories — before the node goes."""
    if node.agent.proc is None or node.agent.proc.poll() is not None:
        node.agent.start()  # a test stopped it: its successor does the draining
    for manifest in (node.agent.workdir / "manifests").iterdir():
        manifest.unlink()
    kubectl("delete", "pods", "--all-namespaces", "--field-selector", f"spec.nodeName={node.name}",
            "--grace-period=1", "--wait=false", check=False)

    async def no_sandboxes() -> bool:
        cri = node.cri()
        try:
            return not await cri.list_pod_sandbox()
        finally:
            await cri.close()
    run_to_completion(wait_for(no_sandboxes, 90, f"node {node.name} to remove its pods", interval=0.5,
                               describe=node.agent.describe))


def stop_node(node: Node) -> None:
    try:
        drain(node)
    finally:
        _stop_node(node)


def _stop_node(node: Node) -> None:
    node.agent.shutdown()
    subprocess.run(["bash", str(CONTAINERD_NODE), "down", node.name], capture_output=True, timeout=120)
    unmount_under(str(node.agent.workdir))  # the token tmpfs of the pods that were still running
    kubectl("delete", "node", node.name, "--wait=false", check=False)
    host_network_down(node.name)


@pytest.fixture(scope="module", params=["agent", "runtime"])
def nodes(request, cluster, lan, tmp_path_factory):  # noqa: F811
    """Two Ready nodes in the given network mode; torn down (Nodes deleted) after the module."""
    mode = request.param
    subnet = {"agent": 10, "runtime": 20}[mode]
    started: list[Node] = []
    try:
        for i in (1, 2):
            name = f"pkl-{mode[0]}{i}"
            started.append(start_node(name, f"10.250.0.{subnet + i}", mode, tmp_path_factory.mktemp(name)))
        for node in started:
            asyncio.run(wait_for(lambda: node.ready().get("status") == "True", 90, f"node {node.name} Ready",
                                 describe=node.agent.describe))
        yield started
    finally:
        for node in started:
            stop_node(node)
