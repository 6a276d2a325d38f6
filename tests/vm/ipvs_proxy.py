"""`pykubelet proxy` in IPVS mode on a Debian 12 VM, whose kernel has ip_vs and dummy links (this
machine's has neither): one node provisioned as the Vagrantfile's control plane, the proxy run
by the kube-proxy.service unit the install ships with a `mode: ipvs` KubeProxyConfiguration.
Then kube-ipvs0 holding the Service IPs, a virtual server per Service address and port with
the endpoints as real servers (as `ipvsadm -Ln` would list them, read from /proc/net/ip_vs),
a ClusterIP and a NodePort answering, ClientIP affinity as persistence, a deleted endpoint's
real server removed, and `--cleanup` leaving no virtual server, link, chain or ipset.

Not collected by `make test` (the file name is not test_*.py; a VM under emulation takes
minutes): `pytest tests/vm/ipvs_proxy.py`.
"""

from __future__ import annotations

import base64
import ipaddress
import json

import pytest

from tests.helpers import wait_for
from tests.vm.conftest import journal
from tests.vm.kubeadm_cluster import Cluster, one_node_cluster, running

NODE = "pkl-ipvs"
CONFIG = """apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: ipvs
clusterCIDR: 10.244.0.0/16
hostnameOverride: {node}
clientConnection: {{kubeconfig: /etc/kubernetes/admin.conf}}
ipvs: {{scheduler: rr, minSyncPeriod: 0s}}
"""
WEB = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
       "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 1, "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": "main", "image": "docker.io/library/busybox:1.36",
                                "imagePullPolicy": "IfNotPresent",
                                "command": ["sh", "-c", "mkdir -p /www && echo hello-from-web > /www/index.html && "
                                                        "exec httpd -f -p 8080 -h /www"]}]}}
SERVICE = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "default"},
           "spec": {"type": "NodePort", "selector": {"app": "web"},
                    "ports": [{"port": 80, "targetPort": 8080, "nodePort": 30080, "protocol": "TCP"}]}}


@pytest.fixture(scope="module")
def cluster(vm_bed, private_ports):
    with one_node_cluster(vm_bed, private_ports, NODE, 12) as made:
        yield made


def apply(cluster: Cluster, obj: dict) -> None:
    cluster.cp.ssh(f"echo {json.dumps(json.dumps(obj))} | kubectl --kubeconfig /etc/kubernetes/admin.conf apply -f -",
                   timeout=120)


def virtual_servers(cluster: Cluster) -> dict[str, dict]:
    """/proc/net/ip_vs as "10.96.0.1:443/TCP" -> {"scheduler", "persistent" (jiffies or 0), "real": {ip:port: weight},
    "forward": the real servers' forwarding methods ("Masq", "Route", ...)}; empty until the proxy has loaded
    ip_vs (the file appears with the module)."""
    out: dict[str, dict] = {}
    current: dict | None = None
    for line in cluster.cp.ssh("cat /proc/net/ip_vs 2>/dev/null || true", timeout=60).stdout.splitlines():
        fields = line.split()
        if fields[:1] in (["TCP"], ["UDP"], ["SCTP"]):
            current = {"scheduler": fields[2], "persistent": int(fields[4]) if "persistent" in fields else 0,
                       "real": {}, "forward": set()}
            out[f"{_address(fields[1])}/{fields[0]}"] = current
        elif fields[:1] == ["->"] and current is not None and ":" in fields[1]:
            current["real"][_address(fields[1])] = int(fields[3])
            current["forward"].add(fields[2])
    return out


def _address(hex_address: str) -> str:
    ip, port = hex_address.split(":")
    return f"{ipaddress.IPv4Address(int(ip, 16))}:{int(port, 16)}"


def fetch(cluster: Cluster, url: str) -> str:
    """GET from the node itself (the venv's Python: the image need not have curl); the body, or
    the client's error when there is none."""
    code = f"import urllib.request; print(urllib.request.urlopen({url!r}, timeout=10).read().decode())"
    result = cluster.cp.ssh(f"/opt/pykubelet/venv/bin/python -c {json.dumps(code)}", timeout=60, check=False)
    return result.stdout if result.returncode == 0 else f"{result.stdout}{result.stderr[-600:]}"


# The node's IPVS data path as it is, for a failure's message: the image has neither ipvsadm nor
# ipset, so /proc's tables and the sets as the proxy reads them stand in for them.
IPSETS = base64.b64encode(b"""import asyncio
from pyroute2.ipset import AsyncIPSet
from pykubelet.proxy.ipvs_ipsets import _members
async def main():
    async with AsyncIPSet() as s:
        for name, entries in sorted((await _members(s)).items()):
            print(name, sorted(entries))
asyncio.run(main())
""").decode()  # base64: its newlines intact through ssh and bash
DATAPATH = ("(command -v ipvsadm >/dev/null && ipvsadm -Ln --stats) || cat /proc/net/ip_vs /proc/net/ip_vs_stats; "
            "cat /proc/net/ip_vs_conn; iptables-save -t nat; iptables-save -t filter | grep -i kube; "
            "(command -v ipset >/dev/null && ipset list) || "
            f"echo {IPSETS} | base64 -d | /opt/pykubelet/venv/bin/python -; "
            "ip addr show kube-ipvs0; ip route show table local; ip route; "
            "sysctl net.ipv4.vs.conntrack net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables; "
            "command -v conntrack >/dev/null && conntrack -L 2>&1 | tail -40")


def datapath(cluster: Cluster) -> str:
    result = cluster.cp.ssh(f"{{ {DATAPATH}; }} 2>&1", timeout=120, check=False)
    return f"--- the IPVS data path on {cluster.cp.name} ---\n{result.stdout[-12000:]}"


def describe(cluster: Cluster) -> str:
    return cluster.describe() + journal(cluster.cp, "kube-proxy") + datapath(cluster)


async def test_the_proxy_starts_in_ipvs_mode_and_puts_the_kubernetes_service_on_kube_ipvs0(cluster: Cluster):
    await wait_for(lambda: cluster.ready(NODE), 300, f"{NODE} Ready", interval=5, describe=cluster.describe)
    config = base64.b64encode(CONFIG.format(node=NODE).encode()).decode()  # its newlines intact through ssh and bash
    cluster.cp.ssh(f"mkdir -p /var/lib/kube-proxy && echo {config} | base64 -d > /var/lib/kube-proxy/config.conf "
                   "&& systemctl start kube-proxy", timeout=120)
    kubernetes = cluster.json("get", "service", "kubernetes")["spec"]["clusterIP"]
    await wait_for(lambda: f"{kubernetes}:443/TCP" in virtual_servers(cluster), 300,
                   "the kubernetes Service's virtual server", interval=5, describe=lambda: describe(cluster))
    links = cluster.cp.ssh("ip -4 -o addr show dev kube-ipvs0; cat /proc/sys/net/ipv4/vs/conntrack "
                           "/proc/sys/net/ipv4/vs/expire_nodest_conn", timeout=60).stdout
    assert f"inet {kubernetes}/32" in links and links.split()[-2:] == ["1", "1"], links
    assert virtual_servers(cluster)[f"{kubernetes}:443/TCP"]["real"] == {f"{cluster.cp.ip}:6443": 1}
    assert fetch(cluster, "http://127.0.0.1:10249/proxyMode").strip() == "ipvs"


async def test_a_cluster_ip_and_a_node_port_lead_to_the_pod(cluster: Cluster):
    apply(cluster, WEB)
    apply(cluster, SERVICE)
    pod = (await wait_for(lambda: running(cluster, ("web",)), 300, "the web pod Running", interval=5,
                          describe=cluster.describe))["web"]
    cluster_ip = cluster.json("get", "service", "web")["spec"]["clusterIP"]
    endpoint = f"{pod['status']['podIP']}:8080"
    await wait_for(lambda: virtual_servers(cluster).get(f"{cluster_ip}:80/TCP", {}).get("real") == {endpoint: 1}, 120,
                   "the web Service's real server", interval=3, describe=lambda: describe(cluster))
    servers = virtual_servers(cluster)
    assert servers[f"{cluster_ip}:80/TCP"]["scheduler"] == "rr"
    # kube-proxy's real servers are masqueraded: directly routed, the pod gets packets still
    # addressed to the cluster IP, drops them, and the client times out
    assert servers[f"{cluster_ip}:80/TCP"]["forward"] == {"Masq"}, describe(cluster)
    assert servers[f"{cluster.cp.ip}:30080/TCP"]["real"] == {endpoint: 1}
    sets = cluster.cp.ssh("iptables-save -t nat | grep -c 'match-set KUBE-CLUSTER-IP'", timeout=60).stdout
    assert int(sets) >= 1
    # The pod itself first: a failure below is then the Service path's, not the pod's.
    for url in (f"http://{endpoint}/", f"http://{cluster_ip}/", f"http://{cluster.cp.ip}:30080/"):
        body = fetch(cluster, url)
        assert body.strip() == "hello-from-web", (url, body, describe(cluster))


async def test_client_ip_affinity_is_persistence_with_its_timeout(cluster: Cluster):
    cluster.kubectl("patch", "service", "web", "-p",
                    "'" + json.dumps({"spec": {"sessionAffinity": "ClientIP", "sessionAffinityConfig": {
                        "clientIP": {"timeoutSeconds": 600}}}}) + "'")
    cluster_ip = cluster.json("get", "service", "web")["spec"]["clusterIP"]
    # /proc/net/ip_vs prints the persistence timeout in jiffies (seconds x HZ)
    await wait_for(lambda: virtual_servers(cluster)[f"{cluster_ip}:80/TCP"]["persistent"] in
                   {600 * hz for hz in (100, 250, 300, 1000)}, 120, "persistence 600 s on the web Service",
                   interval=3, describe=lambda: describe(cluster))


async def test_a_deleted_endpoint_leaves_its_virtual_servers(cluster: Cluster):
    cluster_ip = cluster.json("get", "service", "web")["spec"]["clusterIP"]
    cluster.kubectl("delete", "pod", "web", "--wait=false")
    # The fetches above left their connections in IPVS's TIME_WAIT (2 minutes) as inactive ones:
    # the real server drains at weight 0 and goes once they are gone, at the next check (every
    # minute, at a sync; syncs come at least every 30 s).
    await wait_for(lambda: virtual_servers(cluster)[f"{cluster_ip}:80/TCP"]["real"] == {}, 300,
                   "the web Service without real servers", interval=3, describe=lambda: describe(cluster))
    cluster.kubectl("delete", "service", "web")
    await wait_for(lambda: f"{cluster_ip}:80/TCP" not in virtual_servers(cluster), 120,
                   "the web Service's virtual server gone", interval=3, describe=lambda: describe(cluster))
    assert f"inet {cluster_ip}/" not in cluster.cp.ssh("ip -4 -o addr show dev kube-ipvs0", timeout=60).stdout


async def test_cleanup_removes_the_virtual_servers_the_link_the_chains_and_the_ipsets(cluster: Cluster):
    cluster.cp.ssh("systemctl stop kube-proxy && /usr/bin/pykubelet proxy --cleanup", timeout=120)
    assert virtual_servers(cluster) == {}
    assert cluster.cp.ssh("ip -o link show kube-ipvs0", timeout=60, check=False).returncode != 0
    chains = cluster.cp.ssh("iptables-save | grep -c 'KUBE-IPVS\\|KUBE-SERVICES\\|match-set'", timeout=60,
                            check=False).stdout
    assert chains.strip() == "0", chains
    code = ("from pyroute2.ipset import IPSet; "
            "print(sorted(m.get_attr('IPSET_ATTR_SETNAME') for m in IPSet().list()))")
    sets = cluster.cp.ssh(f"/opt/pykubelet/venv/bin/python -c {json.dumps(code)}", timeout=60).stdout
    assert "KUBE-" not in sets, sets
