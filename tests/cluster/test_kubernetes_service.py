"""The `kubernetes` Service's endpoint answers the pods of a node joined on this machine, and
nobody beyond it: the address the test control plane advertises (tests/bed/cluster.sh) is this
machine's own while the control plane runs, with a relay to the apiserver on it.

A pod reaches the apiserver at 10.96.0.1:443 once a proxy DNATs that to the endpoint. The cluster
tier runs no proxy in the machine's own network namespace (its rules would be the machine's), so
these pods connect to the endpoint itself; the proxy's part is tested on the multi-node bed
(tests/multinode/test_services.py), whose LAN has the same address in a namespace of its own.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from typing import Any

from tests.cluster.conftest import CLUSTER_SH, apply, kubectl, kubectl_json, running_pods
from tests.cluster.test_diagnose import free_port, free_port_pair
from tests.helpers import wait_for
from tests.runtime.conftest import NODE, pod_manifest

ADVERTISE = os.environ.get("PYKUBELET_API_ADVERTISE_ADDRESS", "10.250.0.1")  # cluster.sh's default
API_PORT = int(os.environ.get("PYKUBELET_API_PORT", "6443"))


def kubernetes_endpoint() -> tuple[str, int]:
    endpoints = kubectl_json("get", "endpointslice", "kubernetes", "-n", "default")
    (endpoint,) = endpoints["endpoints"]
    (port,) = endpoints["ports"]
    return endpoint["addresses"][0], port["port"]


def curl(*argv: str, netns: str | None = None) -> subprocess.CompletedProcess[str]:
    prefix = ["ip", "netns", "exec", netns] if netns else []
    return subprocess.run([*prefix, "curl", "-sk", "--max-time", "5", *argv], capture_output=True, text=True,
                          timeout=30)


async def test_a_pod_gets_the_apiserver_at_the_kubernetes_services_endpoint(node_agent, namespace):
    host, port = kubernetes_endpoint()
    assert (host, port) == (ADVERTISE, API_PORT)
    manifest: dict[str, Any] = pod_manifest("client", "sleep 3600")
    manifest["metadata"]["namespace"] = namespace
    manifest["spec"]["nodeSelector"] = {"kubernetes.io/hostname": NODE}
    apply(manifest)
    await wait_for(lambda: running_pods(namespace, 1), 60, "the pod Running", describe=node_agent.describe)

    last: list[subprocess.CompletedProcess[str]] = []

    def answer() -> str | None:
        # Plain HTTP to the TLS port: Go's HTTPS server (the apiserver) answers that with a 400 of
        # its own words; busybox has no TLS client that can talk to it, and the relay adds nothing.
        # (nc shuts its sending side once the request is written: the answer comes after that.)
        result = kubectl("exec", "-n", namespace, "client", "--", "sh", "-c",
                         f"printf 'GET /healthz HTTP/1.0\\r\\n\\r\\n' | nc -w 3 {host} {port}", check=False)
        last[:] = [result]
        return result.stdout or None

    def describe() -> str:
        exec_result = f"--- the last exec: exit {last[0].returncode}, stderr {last[0].stderr!r}\n" if last else ""
        return exec_result + node_agent.describe()
    reply = await wait_for(answer, 30, "an answer from the endpoint to the pod", describe=describe)
    assert reply.startswith("HTTP/1.0 400 Bad Request") and "Client sent an HTTP request to an HTTPS server" in reply


def test_a_host_beyond_this_machine_is_turned_away(cluster):
    """Another host routing the address to this machine reaches it, but not the apiserver."""
    outside, link = "pkl-outside", "pkl-out0"
    subprocess.run(["ip", "netns", "del", outside], capture_output=True)
    try:
        for argv in (["ip", "netns", "add", outside],
                     ["ip", "link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", outside],
                     ["ip", "addr", "add", "10.199.250.1/30", "dev", link], ["ip", "link", "set", link, "up"],
                     ["ip", "-n", outside, "addr", "add", "10.199.250.2/30", "dev", "eth0"],
                     ["ip", "-n", outside, "link", "set", "eth0", "up"],
                     ["ip", "-n", outside, "route", "add", f"{ADVERTISE}/32", "via", "10.199.250.1"]):
            subprocess.run(argv, check=True, capture_output=True)
        # The connection is accepted (the address is this machine's) and closed at once, unanswered.
        # (Admitted, it would wait for the client's TLS hello: the read would time out instead.)
        probe = ("import socket, sys; s = socket.create_connection((sys.argv[1], int(sys.argv[2])), 5); "
                 "print(repr(s.recv(100)))")
        result = subprocess.run(["ip", "netns", "exec", outside, sys.executable, "-c", probe, ADVERTISE, str(API_PORT)],
                                capture_output=True, text=True, timeout=30)
        assert result.stdout.strip() == "b''", result.stderr
        assert curl(f"https://{ADVERTISE}:{API_PORT}/healthz").stdout == "ok"  # this machine itself
    finally:
        subprocess.run(["ip", "netns", "del", outside], capture_output=True)  # its veth, and the peer here


def test_down_removes_the_address_and_the_relay_up_added(tmp_path: pathlib.Path):
    address = "10.250.200.1"  # one no other control plane of the tests uses
    port = free_port()
    env = {**os.environ, "PYKUBELET_CLUSTER_DIR": str(tmp_path / "cluster"), "PYKUBELET_API_PORT": str(port),
           "PYKUBELET_ETCD_PORT": str(free_port_pair()), "PYKUBELET_CM_PORT": str(free_port()),
           "PYKUBELET_SCHED_PORT": str(free_port()), "PYKUBELET_API_ADVERTISE_ADDRESS": address}

    def cluster_sh(*args: str) -> None:
        result = subprocess.run(["bash", str(CLUSTER_SH), *args], env=env, capture_output=True, text=True,
                                timeout=900)
        assert result.returncode == 0, f"cluster.sh {args} failed:\n{result.stderr[-3000:]}"

    def on_lo() -> str:
        return subprocess.run(["ip", "-o", "addr", "show", "dev", "lo", "to", f"{address}/32"],
                              capture_output=True, text=True).stdout
    assert not on_lo()
    cluster_sh("up")
    try:
        assert on_lo() and curl(f"https://{address}:{port}/healthz").stdout == "ok"
    finally:
        cluster_sh("down", "--purge")
    assert not on_lo()
    assert not subprocess.run(["ss", "-Hltn", f"src {address}"], capture_output=True, text=True).stdout
