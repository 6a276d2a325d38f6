"""The Kubernetes network model across nodes, in both network modes: every pod gets its own IP
from its node's podCIDR, and reaches any other pod by that IP, on any node, without NAT."""

from __future__ import annotations

import ipaddress
import signal
import subprocess
from typing import Any

from pykubelet.cri import errors
from pykubelet.runtime import labels
from tests.cluster.conftest import apply, kubectl, pods_in
from tests.helpers import wait_for
from tests.multinode.conftest import Node, in_netns
from tests.runtime.conftest import BUSYBOX

# busybox httpd answers /cgi-bin/ip with the address the request came from ("[::ffff:a.b.c.d]":
# it listens on IPv6 with IPv4-mapped addresses).
WHOAMI_SERVER = ("mkdir -p /www/cgi-bin && printf '#!/bin/sh\\necho Content-Type: text/plain\\necho\\n"
                 "echo $REMOTE_ADDR\\n' >/www/cgi-bin/ip && chmod +x /www/cgi-bin/ip && exec httpd -f -p 8080 -h /www")


def pod(name: str, namespace: str, node: Node, command: str, **container: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": node.name}, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "main", "image": BUSYBOX, "command": ["sh", "-c", command],
                                     **container}]}}


def running(namespace: str, names: set[str]) -> dict[str, dict[str, Any]] | None:
    pods = {p["metadata"]["name"]: p for p in pods_in(namespace)}
    ok = {n: p for n, p in pods.items() if n in names and p["status"].get("phase") == "Running"
          and p["status"].get("podIP")}
    return ok if len(ok) == len(names) else None


async def fetch_from_pod(node: Node, namespace: str, pod_name: str, url: str) -> str:
    """wget run inside the pod (CRI ExecSync on its node's containerd); the body, or "" on failure."""
    cri = node.cri()
    try:
        (container,) = await cri.list_containers({labels.POD_NAME: pod_name, labels.POD_NAMESPACE: namespace})
        # (no wget -T: it crashes this busybox; ExecSync's timeout bounds the call instead)
        answer = await cri.exec_sync(container.id, ["wget", "-qO-", url], 5)
        return client_address(answer.stdout.decode()) if answer.exit_code == 0 else ""
    except errors.CRIError:
        return ""
    finally:
        await cri.close()


def client_address(body: str) -> str:
    return body.strip().strip("[]").removeprefix("::ffff:")


async def test_pod_ips_are_unique_and_inside_their_nodes_pod_cidr(nodes, namespace):
    n1, n2 = nodes
    names = {"a1", "a2", "b1", "b2"}
    apply([pod("a1", namespace, n1, "sleep 3600"), pod("a2", namespace, n1, "sleep 3600"),
           pod("b1", namespace, n2, "sleep 3600"), pod("b2", namespace, n2, "sleep 3600")])
    pods = await wait_for(lambda: running(namespace, names), 90, "4 pods Running with IPs",
                          describe=lambda: n1.agent.describe() + n2.agent.describe())
    ips = {name: p["status"]["podIP"] for name, p in pods.items()}
    assert len(set(ips.values())) == 4, ips
    cidr1, cidr2 = ipaddress.ip_network(n1.pod_cidr()), ipaddress.ip_network(n2.pod_cidr())
    assert cidr1 != cidr2
    for name, ip in ips.items():
        assert ipaddress.ip_address(ip) in (cidr1 if name.startswith("a") else cidr2), (name, ip, cidr1, cidr2)
        assert pods[name]["status"]["podIPs"] == [{"ip": ip}]


async def test_pod_reaches_a_pod_on_another_node_without_nat(nodes, namespace):
    n1, n2 = nodes
    apply([pod("server", namespace, n2, WHOAMI_SERVER), pod("client", namespace, n1, "sleep 3600")])
    pods = await wait_for(lambda: running(namespace, {"server", "client"}), 90, "server and client Running",
                          describe=lambda: n1.agent.describe() + n2.agent.describe())
    server_ip, client_ip = pods["server"]["status"]["podIP"], pods["client"]["status"]["podIP"]
    seen = await wait_for(lambda: fetch_from_pod(n1, namespace, "client", f"http://{server_ip}:8080/cgi-bin/ip"),
                          30, "the client's request to reach the server on the other node")
    assert seen == client_ip, f"the server saw {seen}, not the client's pod IP {client_ip} (NAT?)"


async def test_host_port_is_reachable_on_the_node_ip(nodes, namespace):
    n1, n2 = nodes
    apply(pod("web", namespace, n1, WHOAMI_SERVER, ports=[{"containerPort": 8080, "hostPort": 18080}]))
    await wait_for(lambda: running(namespace, {"web"}), 90, "web Running", describe=n1.agent.describe)

    def fetch_from_other_node() -> str:
        # From the other node's host network, to this node's IP and the host port.
        result = in_netns(n2.name, "busybox", "wget", "-qO-", f"http://{n1.ip}:18080/cgi-bin/ip")
        return client_address(result.stdout) if result.returncode == 0 else ""
    seen = await wait_for(fetch_from_other_node, 30, f"http://{n1.ip}:18080 to answer")
    assert seen == n2.ip  # the node's own address: hostPort traffic from outside keeps its source


async def test_deleting_pods_frees_their_ips(nodes, namespace):
    n1, _ = nodes
    apply([pod("short1", namespace, n1, "sleep 3600"), pod("short2", namespace, n1, "sleep 3600")])
    pods = await wait_for(lambda: running(namespace, {"short1", "short2"}), 90, "2 pods Running",
                          describe=n1.agent.describe)
    ips = {p["status"]["podIP"] for p in pods.values()}
    assert ips <= n1.reserved_ips()
    kubectl("delete", "pod", "short1", "short2", "-n", namespace, "--wait=true", "--timeout=60s")
    await wait_for(lambda: not (ips & n1.reserved_ips()), 30, "the deleted pods' IPs to be released",
                   describe=lambda: f"reserved: {n1.reserved_ips()}\n{n1.agent.describe()}")


async def test_agents_killed_and_restarted_keep_every_pods_ip_and_connectivity(nodes, namespace):
    n1, n2 = nodes
    apply([pod("server", namespace, n2, WHOAMI_SERVER), pod("client", namespace, n1, "sleep 3600")])
    before = await wait_for(lambda: running(namespace, {"server", "client"}), 90, "server and client Running",
                            describe=lambda: n1.agent.describe() + n2.agent.describe())
    for node in nodes:
        node.agent.stop(signal.SIGKILL)
    for node in nodes:
        node.agent.start()
    server_ip, client_ip = before["server"]["status"]["podIP"], before["client"]["status"]["podIP"]
    seen = await wait_for(lambda: fetch_from_pod(n1, namespace, "client", f"http://{server_ip}:8080/cgi-bin/ip"),
                          30, "the client to reach the server after the restarts")
    assert seen == client_ip
    # A new pod after the restart gets a fresh IP, not one of the running pods'.
    apply(pod("late", namespace, n2, "sleep 3600"))
    after = await wait_for(lambda: running(namespace, {"server", "client", "late"}), 90, "the late pod Running",
                           describe=n2.agent.describe)
    assert after["late"]["status"]["podIP"] not in {server_ip, client_ip}
    for name in ("server", "client"):
        assert after[name]["status"]["podIP"] == before[name]["status"]["podIP"]
        assert after[name]["status"]["containerStatuses"][0]["restartCount"] == 0


async def test_host_network_pods_get_the_node_ip_and_no_pod_ip(nodes, namespace):
    n1, _ = nodes
    before = n1.reserved_ips()
    manifest = pod("hostnet", namespace, n1, "sleep 3600")
    manifest["spec"]["hostNetwork"] = True
    apply(manifest)
    pods = await wait_for(lambda: running(namespace, {"hostnet"}), 90, "the hostNetwork pod Running",
                          describe=n1.agent.describe)
    assert pods["hostnet"]["status"]["podIP"] == n1.ip
    # No new reservation (earlier tests' pods may still be giving theirs back meanwhile).
    assert n1.reserved_ips() <= before


async def test_a_pod_removed_while_the_agent_was_down_gives_its_ip_back(nodes, namespace):
    n1, _ = nodes
    apply(pod("doomed", namespace, n1, "sleep 3600"))
    pods = await wait_for(lambda: running(namespace, {"doomed"}), 90, "the pod Running", describe=n1.agent.describe)
    ip = pods["doomed"]["status"]["podIP"]
    n1.agent.stop(signal.SIGKILL)
    # While the agent is down the pod goes away for good: its API object, and its sandbox (the
    # way `crictl rmp` would; containerd's DEL then finds no agent in agent mode).
    kubectl("delete", "pod", "doomed", "-n", namespace, "--grace-period=0", "--force")
    cri = n1.cri()
    try:
        for sandbox in await cri.list_pod_sandbox({labels.POD_NAME: "doomed", labels.POD_NAMESPACE: namespace}):
            await cri.stop_pod_sandbox(sandbox.id)
            await cri.remove_pod_sandbox(sandbox.id)
    finally:
        await cri.close()
    n1.agent.start()
    await wait_for(lambda: ip not in n1.reserved_ips(), 30, f"{ip} released after the agent came back",
                   describe=lambda: f"reserved: {n1.reserved_ips()}\n{n1.agent.describe()}")


async def test_routes_follow_nodes_even_those_deleted_while_the_agent_was_down(nodes):
    n1, _ = nodes
    ghost = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"pkl-ghost-{n1.mode}"},
             "spec": {"podCIDR": "10.245.99.0/24"},
             "status": {"addresses": [{"type": "InternalIP", "address": "10.250.0.99"}]}}
    apply(ghost)
    # (the status in a create is dropped: an admin can't set it that way, a node's agent does)
    kubectl("patch", "node", ghost["metadata"]["name"], "--subresource", "status", "--type", "merge",
            "-p", '{"status": {"addresses": [{"type": "InternalIP", "address": "10.250.0.99"}]}}')

    def route_to_ghost() -> str:
        return in_netns(n1.name, "ip", "route", "show", "10.245.99.0/24").stdout.strip()
    try:
        assert "via 10.250.0.99" in await wait_for(route_to_ghost, 30, "a route to the new node's pods",
                                                   describe=n1.agent.describe)
        n1.agent.stop(signal.SIGKILL)
        kubectl("delete", "node", ghost["metadata"]["name"])
        n1.agent.start()
        await wait_for(lambda: not route_to_ghost(), 30, "the route to the deleted node's pods removed",
                       describe=n1.agent.describe)
    finally:
        kubectl("delete", "node", ghost["metadata"]["name"], check=False)


async def test_traffic_leaving_the_cluster_is_masqueraded_to_the_node_ip(nodes, namespace, lan, tmp_path):
    n1, _ = nodes
    # "Outside the cluster": a web server on the LAN itself, in no node's podCIDR.
    outside = "10.250.0.254"
    cgi = tmp_path / "www" / "cgi-bin"
    cgi.mkdir(parents=True)
    (cgi / "ip").write_text('#!/bin/sh\necho Content-Type: text/plain\necho\necho "$REMOTE_ADDR"\n')
    (cgi / "ip").chmod(0o755)
    subprocess.run(["ip", "-n", lan, "addr", "replace", f"{outside}/24", "dev", "lan0"], check=True)
    server = subprocess.Popen(["ip", "netns", "exec", lan, "busybox", "httpd", "-f", "-p", f"{outside}:8081",
                               "-h", str(tmp_path / "www")])
    try:
        apply(pod("leaver", namespace, n1, "sleep 3600"))
        await wait_for(lambda: running(namespace, {"leaver"}), 90, "the pod Running", describe=n1.agent.describe)
        seen = await wait_for(lambda: fetch_from_pod(n1, namespace, "leaver", f"http://{outside}:8081/cgi-bin/ip"),
                              30, "the pod to reach the server outside the cluster", describe=n1.agent.describe)
        assert seen == n1.ip  # the outside world sees the node, not the pod
    finally:
        server.kill()
        server.wait()
        subprocess.run(["ip", "-n", lan, "addr", "del", f"{outside}/24", "dev", "lan0"], capture_output=True)
