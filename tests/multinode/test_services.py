"""Services on the multi-node test bed, in both proxy modes: `pykubelet proxy` runs as a process
in each node's host network namespace (as kube-proxy runs on a node), with a ServiceAccount
identity bound to system:node-proxier (pykubelet/proxy/rbac.yaml), reaching the apiserver over the
LAN. Real pods, real Services and EndpointSlices from the real control plane, real netfilter.

Every test ends with no rule of its Services left on any node; the module ends with `--cleanup`
on every node, which must leave no chain or table of the proxy behind.
"""

from __future__ import annotations

import asyncio
import base64
import json
import pathlib
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from pykubelet.cri import errors
from pykubelet.runtime import labels
from pykubelet.tools.leak_checks import leaked_proxy_rules
from tests.cluster.conftest import KUBECTL, REPO, STATE, apply, kubectl, kubectl_json
from tests.helpers import wait_for
from tests.multinode.conftest import API_PORT, CONTROL_PLANE_IP, Node, in_netns, start_node, stop_node
from tests.multinode.test_pod_network import client_address, pod, running

CLUSTER_CIDR = "10.244.0.0/16"  # the controller-manager's --cluster-cidr (tests/bed/cluster.sh)
HEALTHZ, METRICS = "127.0.0.1:10256", "127.0.0.1:10249"  # inside each node's namespace
# busybox httpd: /cgi-bin/ip answers the client's address, /cgi-bin/name the pod's name.
SERVER = ("mkdir -p /www/cgi-bin && printf '#!/bin/sh\\necho Content-Type: text/plain\\necho\\necho $REMOTE_ADDR\\n' "
          ">/www/cgi-bin/ip && printf '#!/bin/sh\\necho Content-Type: text/plain\\necho\\nhostname\\n' "
          ">/www/cgi-bin/name && chmod +x /www/cgi-bin/* && touch /tmp/ready && exec httpd -f -p 8080 -h /www")


@dataclass
class Proxy:
    """`pykubelet proxy` in a node's host network namespace."""

    node: Node
    mode: str
    args: list[str]
    log_path: pathlib.Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> "Proxy":
        with open(self.log_path, "ab") as log:
            log.write(b"--- proxy start ---\n")
            self.proc = subprocess.Popen(["ip", "netns", "exec", self.node.name, sys.executable, "-m", "pykubelet.cli",
                                          "proxy", *self.args], cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        return self

    def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=15)

    def rules(self) -> str:
        """What the proxy programmed in its node: iptables-save, or our nftables table."""
        if self.mode == "iptables":
            return in_netns(self.node.name, "iptables-save").stdout
        return in_netns(self.node.name, "nft", "list", "table", "ip", "kube-proxy").stdout

    def describe(self) -> str:
        return f"--- proxy on {self.node.name} ---\n{self.log_path.read_text(errors='replace')[-5000:]}"


@dataclass
class Bed:
    mode: str
    nodes: list[Node]
    proxies: list[Proxy]

    def describe(self) -> str:
        return "\n".join(p.describe() for p in self.proxies)

    def rules_everywhere(self, text: str) -> bool:
        return all(text in p.rules() for p in self.proxies)

    def rules_nowhere(self, text: str) -> bool:
        return not any(text in p.rules() for p in self.proxies)


def proxy_kubeconfig(path: pathlib.Path) -> None:
    """The kube-proxy ServiceAccount's token, and the apiserver at its LAN address."""
    token = kubectl("create", "token", "kube-proxy", "-n", "kube-system", "--duration", "3h").stdout.strip()
    ca = base64.b64encode((STATE / "pki" / "ca.crt").read_bytes()).decode()
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "proxy",
        "clusters": [{"name": "lan", "cluster": {"server": f"https://{CONTROL_PLANE_IP}:{API_PORT}",
                                                 "certificate-authority-data": ca, "tls-server-name": "kubernetes"}}],
        "users": [{"name": "kube-proxy", "user": {"token": token}}],
        "contexts": [{"name": "proxy", "context": {"cluster": "lan", "user": "kube-proxy"}}]}))


def proxy_args(mode: str, node: Node, kubeconfig: pathlib.Path, workdir: pathlib.Path) -> list[str]:
    """iptables mode from flags; nftables mode from a KubeProxyConfiguration file (both ways get used)."""
    if mode == "iptables":
        return ["--kubeconfig", str(kubeconfig), "--hostname-override", node.name, "--proxy-mode", "iptables",
                "--cluster-cidr", CLUSTER_CIDR, "--healthz-bind-address", HEALTHZ, "--metrics-bind-address", METRICS]
    config = workdir / "kube-proxy.yaml"
    config.write_text(yaml.safe_dump({
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)}, "mode": "nftables", "clusterCIDR": CLUSTER_CIDR,
        "healthzBindAddress": HEALTHZ, "metricsBindAddress": METRICS,
        "nftables": {"syncPeriod": "30s", "minSyncPeriod": "1s"}}))
    return ["--config", str(config), "--hostname-override", node.name]


@pytest.fixture(scope="module", params=["iptables", "nftables"])
def bed(request, cluster, lan, tmp_path_factory):  # noqa: F811
    mode = request.param
    subnet = {"iptables": 30, "nftables": 40}[mode]
    kubectl("apply", "-f", str(REPO / "pykubelet" / "proxy" / "rbac.yaml"))
    workdir = tmp_path_factory.mktemp(f"services-{mode}")
    kubeconfig = workdir / "proxy.kubeconfig"
    nodes: list[Node] = []
    proxies: list[Proxy] = []
    try:
        for i in (1, 2):
            name = f"pkl-s{mode[0]}{i}"
            nodes.append(start_node(name, f"10.250.0.{subnet + i}", "agent", tmp_path_factory.mktemp(name)))
            # A node has a default route; its own processes need one to send anything to a Service IP
            # at all (the route is looked up before the DNAT). The control plane's host is the gateway.
            in_netns(name, "ip", "route", "replace", "default", "via", CONTROL_PLANE_IP)
        proxy_kubeconfig(kubeconfig)
        for node in nodes:
            proxies.append(Proxy(node, mode, proxy_args(mode, node, kubeconfig, workdir),
                                 workdir / f"proxy-{node.name}.log").start())
        for node in nodes:
            asyncio.run(wait_for(lambda: node.ready().get("status") == "True", 90, f"node {node.name} Ready",
                                 describe=node.agent.describe))
        b = Bed(mode, nodes, proxies)
        asyncio.run(wait_for(lambda: b.rules_everywhere("default/kubernetes"), 30,
                             "both proxies to program the kubernetes Service", describe=b.describe))
        yield b
    finally:
        for proxy in proxies:
            proxy.stop()
            cleanup = in_netns(proxy.node.name, sys.executable, "-m", "pykubelet.cli", "proxy", "--cleanup",
                               timeout=60)
            assert cleanup.returncode == 0, cleanup.stderr
        for node in nodes:
            stop_node(node)


@pytest.fixture
async def ns(bed):
    """A namespace for the test's objects; afterwards its Services are deleted, and no node may keep
    a rule of them."""
    name = f"t-{secrets.token_hex(3)}"
    kubectl("create", "namespace", name)
    await wait_for(lambda: kubectl("get", "serviceaccount", "default", "-n", name, check=False).returncode == 0,
                   60, f"the default service account in {name}")
    yield name
    # Pods first, and wait: a pod leaving a node's bridge may change the bridge's MAC address, and
    # the next test's connections should not meet that.
    kubectl("delete", "pods", "--all", "-n", name, "--grace-period=1", "--wait=true", "--timeout=90s", check=False)
    kubectl("delete", "services", "--all", "-n", name, "--wait=true", "--timeout=60s")
    kubectl("delete", "namespace", name, "--wait=false", check=False)
    await wait_for(lambda: bed.rules_nowhere(f"{name}/"), 15, f"every rule of {name}'s Services removed",
                   describe=bed.describe)


def labelled(manifest: dict[str, Any], **pod_labels: str) -> dict[str, Any]:
    manifest["metadata"]["labels"] = pod_labels
    return manifest


def server(name: str, ns: str, node: Node, app: str, **container: Any) -> dict[str, Any]:
    return labelled(pod(name, ns, node, SERVER, **container), app=app)


def service(name: str, ns: str, app: str, port: int = 80, target: int = 8080, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
            "spec": {"selector": {"app": app}, "ports": [{"name": "http", "port": port, "targetPort": target}],
                     **spec}}


def cluster_ip(ns: str, name: str) -> str:
    return kubectl_json("get", "service", name, "-n", ns)["spec"]["clusterIP"]


def ready_endpoints(ns: str, name: str) -> set[str]:
    slices = kubectl_json("get", "endpointslices", "-n", ns, "-l", f"kubernetes.io/service-name={name}")["items"]
    return {ep["addresses"][0] for s in slices for ep in s.get("endpoints") or []
            if (ep.get("conditions") or {}).get("ready") is not False}


async def pods_running(ns: str, names: set[str], bed: Bed) -> dict[str, dict[str, Any]]:
    return await wait_for(lambda: running(ns, names), 90, f"{sorted(names)} Running",
                          describe=lambda: "".join(n.agent.describe() for n in bed.nodes))


async def exec_in(node: Node, ns: str, pod_name: str, command: str, timeout: int = 10) -> tuple[int, str, str]:
    """sh -c command in the pod (CRI ExecSync on its node): (exit code, stdout, stderr); 124 on a timeout."""
    cri = node.cri()
    try:
        (container,) = await cri.list_containers({labels.POD_NAME: pod_name, labels.POD_NAMESPACE: ns})
        answer = await cri.exec_sync(container.id, ["sh", "-c", command], timeout)
        return answer.exit_code, answer.stdout.decode(), answer.stderr.decode()
    except errors.CRIError as e:
        return 124, "", str(e)
    finally:
        await cri.close()


async def fetch(node: Node, ns: str, pod_name: str, url: str) -> str:
    """The body wget gets in the pod, or "" if it fails (no wget -T: it crashes this busybox)."""
    code, out, _ = await exec_in(node, ns, pod_name, f"wget -qO- {url}", timeout=5)
    return out.strip() if code == 0 else ""


async def names_seen(node: Node, ns: str, pod_name: str, ip: str, requests: int) -> list[str]:
    """The pod names that answered `requests` requests to ip (one new connection each)."""
    code, out, err = await exec_in(node, ns, pod_name, f"for i in $(seq {requests}); do wget -qO- "
                                   f"http://{ip}/cgi-bin/name || echo FAILED; done", timeout=60)
    assert code == 0, err
    return out.split()


async def test_cluster_ip_leads_to_a_pod_on_another_node_which_sees_the_client_ip(bed, ns):
    n1, n2 = bed.nodes
    apply([server("web", ns, n2, "web"), pod("client", ns, n1, "sleep 3600"), service("web", ns, "web")])
    pods = await pods_running(ns, {"web", "client"}, bed)
    ip = cluster_ip(ns, "web")
    seen = await wait_for(lambda: fetch(n1, ns, "client", f"http://{ip}/cgi-bin/ip"), 30,
                          f"the client on {n1.name} to reach the Service {ip}", describe=bed.describe)
    assert client_address(seen) == pods["client"]["status"]["podIP"], "the server should see the client pod's IP"
    # The node itself (its host network: the nat OUTPUT path) reaches it too, masqueraded.
    from_node = in_netns(n1.name, "busybox", "wget", "-qO-", f"http://{ip}/cgi-bin/ip")
    assert from_node.returncode == 0, from_node.stderr
    assert client_address(from_node.stdout) == n1.ip


async def test_traffic_spreads_over_every_endpoint(bed, ns):
    n1, n2 = bed.nodes
    servers = {"s1": n1, "s2": n2, "s3": n2}
    apply([server(name, ns, node, "spread") for name, node in servers.items()] +
          [pod("client", ns, n1, "sleep 3600"), service("spread", ns, "spread")])
    pods = await pods_running(ns, {*servers, "client"}, bed)
    ip = cluster_ip(ns, "spread")
    server_ips = {pods[name]["status"]["podIP"] for name in servers}
    await wait_for(lambda: all(i in bed.proxies[0].rules() for i in server_ips), 30, "all three endpoints in the rules",
                   describe=bed.describe)
    seen = await names_seen(n1, ns, "client", ip, 30)
    # Each of 3 endpoints is picked with probability 1/3: missing one in 30 tries is a 1-in-60,000 event.
    assert set(seen) == set(servers), seen


async def test_client_ip_affinity_sticks_to_one_endpoint(bed, ns):
    n1, n2 = bed.nodes
    servers = {"a1": n1, "a2": n2, "a3": n2}
    apply([server(name, ns, node, "sticky") for name, node in servers.items()] +
          [pod("client", ns, n1, "sleep 3600"),
           service("sticky", ns, "sticky", sessionAffinity="ClientIP",
                   sessionAffinityConfig={"clientIP": {"timeoutSeconds": 600}})])
    pods = await pods_running(ns, {*servers, "client"}, bed)
    server_ips = {pods[name]["status"]["podIP"] for name in servers}
    await wait_for(lambda: all(i in bed.proxies[0].rules() for i in server_ips), 30, "all three endpoints in the rules",
                   describe=bed.describe)
    seen = await names_seen(n1, ns, "client", cluster_ip(ns, "sticky"), 20)
    assert len(set(seen)) == 1 and seen[0] in servers, seen


async def test_a_node_port_answers_on_every_nodes_ip_from_the_lan(bed, ns, lan):
    n1, n2 = bed.nodes
    apply([server("np", ns, n2, "np"), service("np", ns, "np", type="NodePort")])
    await pods_running(ns, {"np"}, bed)
    node_port = kubectl_json("get", "service", "np", "-n", ns)["spec"]["ports"][0]["nodePort"]
    for node in bed.nodes:
        # From the LAN: outside the cluster network, in no node's namespace.
        def from_lan() -> str:
            result = in_netns(lan, "busybox", "wget", "-qO-", f"http://{node.ip}:{node_port}/cgi-bin/name")
            return result.stdout.strip() if result.returncode == 0 else ""
        assert await wait_for(from_lan, 30, f"NodePort {node_port} on {node.name} ({node.ip})",
                              describe=bed.describe) == "np"


async def test_an_endpoint_that_turns_unready_gets_no_new_connections_within_2s(bed, ns):
    n1, n2 = bed.nodes
    probe = {"readinessProbe": {"exec": {"command": ["cat", "/tmp/ready"]}, "periodSeconds": 1,
                                "failureThreshold": 1}}
    apply([server("ok", ns, n2, "flaky", **probe), server("bad", ns, n2, "flaky", **probe),
           pod("client", ns, n1, "sleep 3600"), service("flaky", ns, "flaky")])
    pods = await pods_running(ns, {"ok", "bad", "client"}, bed)
    bad_ip = pods["bad"]["status"]["podIP"]
    await wait_for(lambda: len(ready_endpoints(ns, "flaky")) == 2 and bad_ip in bed.proxies[0].rules(), 60,
                   "both endpoints ready and in the rules", describe=bed.describe)
    code, _, err = await exec_in(n2, ns, "bad", "rm /tmp/ready")
    assert code == 0, err
    await wait_for(lambda: bad_ip not in ready_endpoints(ns, "flaky"), 30, "the EndpointSlice to say unready")
    unready_at = time.monotonic()
    # Within 2 s of the API saying so, the client's node no longer sends anything its way...
    await wait_for(lambda: bad_ip not in bed.proxies[0].rules(), 2.0 - (time.monotonic() - unready_at),
                   f"{bad_ip} out of {n1.name}'s rules within 2s", describe=bed.describe)
    # ...so every new connection goes to the ready one.
    assert set(await names_seen(n1, ns, "client", cluster_ip(ns, "flaky"), 10)) == {"ok"}


async def test_a_service_without_endpoints_rejects_at_once(bed, ns):
    n1, _ = bed.nodes
    apply([pod("client", ns, n1, "sleep 3600"), service("nobody", ns, "nobody")])
    await pods_running(ns, {"client"}, bed)
    await wait_for(lambda: bed.rules_everywhere(f"{ns}/nobody"), 30, "the Service in the rules", describe=bed.describe)
    started = time.monotonic()
    code, _, err = await exec_in(n1, ns, "client", f"wget -qO- http://{cluster_ip(ns, 'nobody')}/", timeout=20)
    # REJECT answers at once with "port unreachable"; a DROP (or no rule) would hang until the timeout.
    assert code != 0 and "Connection refused" in err, (code, err)
    assert time.monotonic() - started < 10


async def test_deleting_a_service_removes_its_rules(bed, ns):
    n1, n2 = bed.nodes
    apply([server("gone", ns, n2, "gone"), service("gone", ns, "gone", type="NodePort")])
    await pods_running(ns, {"gone"}, bed)
    await wait_for(lambda: bed.rules_everywhere(f"{ns}/gone"), 30, "the Service's rules on both nodes",
                   describe=bed.describe)
    kubectl("delete", "service", "gone", "-n", ns)
    await wait_for(lambda: bed.rules_nowhere(f"{ns}/gone"), 10, "the Service's rules removed from both nodes",
                   describe=bed.describe)


async def test_internal_traffic_policy_local_uses_only_this_nodes_endpoints(bed, ns):
    n1, n2 = bed.nodes
    apply([server("local", ns, n2, "local"), pod("near", ns, n2, "sleep 3600"), pod("far", ns, n1, "sleep 3600"),
           service("local", ns, "local", internalTrafficPolicy="Local")])
    await pods_running(ns, {"local", "near", "far"}, bed)
    ip = cluster_ip(ns, "local")
    assert await wait_for(lambda: fetch(n2, ns, "near", f"http://{ip}/cgi-bin/name"), 30,
                          "a client on the endpoint's node to reach it", describe=bed.describe) == "local"
    # The other node has no local endpoint: its pods' packets are dropped, not sent across.
    code, out, _ = await exec_in(n1, ns, "far", f"wget -qO- http://{ip}/cgi-bin/name", timeout=4)
    assert code != 0 and "local" not in out


async def test_a_pod_reaches_itself_through_its_service(bed, ns):
    n1, _ = bed.nodes
    apply([server("self", ns, n1, "self"), service("self", ns, "self")])
    await pods_running(ns, {"self"}, bed)
    ip = cluster_ip(ns, "self")
    assert await wait_for(lambda: fetch(n1, ns, "self", f"http://{ip}/cgi-bin/name"), 30,
                          "the hairpin connection", describe=bed.describe) == "self"


# A web server whose /cgi-bin/stream answers one line every 0.2 s, for as long as the client listens.
STREAMER = ("mkdir -p /www/cgi-bin && printf '#!/bin/sh\\necho Content-Type: text/plain\\necho\\n"
            "while true; do echo tick; sleep 0.2; done\\n' >/www/cgi-bin/stream && chmod +x /www/cgi-bin/stream "
            "&& exec httpd -f -p 8080 -h /www")


async def test_killed_and_restarted_proxies_keep_connections_and_converge(bed, ns):
    n1, n2 = bed.nodes
    # Every pod first, so that while the connection lives only the proxies and the Services change.
    apply([labelled(pod("streamer", ns, n2, STREAMER), app="streamer"), service("stream", ns, "streamer"),
           server("gone", ns, n2, "gone"), service("gone", ns, "gone"), server("late", ns, n2, "late")])
    await pods_running(ns, {"streamer", "gone", "late"}, bed)
    stream_ip = cluster_ip(ns, "stream")
    # One long-lived connection through the Service, a line arriving every 0.2 s. Each time it
    # breaks, the loop notes it in /tmp/breaks and connects again.
    apply(pod("talker", ns, n1, f"while true; do wget -qO- http://{stream_ip}/cgi-bin/stream >>/tmp/streamed; "
                                "echo x >>/tmp/breaks; sleep 0.5; done"))
    await pods_running(ns, {"talker"}, bed)

    async def lines(path: str) -> int:
        code, out, err = await exec_in(n1, ns, "talker", f"cat {path} 2>/dev/null | wc -l")
        assert code == 0, f"exec in the talker failed: {err}"
        return int(out.strip())
    await wait_for(lambda: lines("/tmp/streamed"), 30, "the connection through the Service to carry data",
                   describe=bed.describe)
    breaks_before = await lines("/tmp/breaks")
    for proxy in bed.proxies:
        assert proxy.stop(signal.SIGKILL) == -signal.SIGKILL
    # While no proxy runs: a Service comes, another goes.
    apply(service("late", ns, "late"))
    kubectl("delete", "service", "gone", "-n", ns)
    await wait_for(lambda: ready_endpoints(ns, "late"), 30, "the late Service's endpoint")
    for proxy in bed.proxies:
        proxy.start()
    late_ip = cluster_ip(ns, "late")
    await wait_for(lambda: fetch(n1, ns, "talker", f"http://{late_ip}/cgi-bin/name"), 30,
                   "the Service created while the proxies were down", describe=bed.describe)
    await wait_for(lambda: bed.rules_nowhere(f"{ns}/gone"), 30, "the rules of the Service deleted meanwhile gone",
                   describe=bed.describe)
    before = await lines("/tmp/streamed")
    await wait_for(lambda: _more(lambda: lines("/tmp/streamed"), before + 5), 10,
                   "the old connection to keep carrying data", describe=lambda: diagnose(bed, n1, ns, stream_ip))
    assert await lines("/tmp/breaks") == breaks_before, \
        f"the established connection broke across the proxies' restart\n{diagnose(bed, n1, ns, stream_ip)}"


def diagnose(bed: Bed, node: Node, ns: str, ip: str) -> str:
    flows = in_netns(node.name, "conntrack", "-L", "-p", "tcp", "--orig-dst", ip).stdout
    return f"flows on {node.name}:\n{flows}\n{bed.describe()}"


async def _more(counter, than: int) -> bool:
    return await counter() > than


async def test_health_and_metrics(bed):
    for proxy in bed.proxies:
        healthz = in_netns(proxy.node.name, "busybox", "wget", "-qO-", f"http://{HEALTHZ}/healthz")
        assert healthz.returncode == 0, healthz.stderr
        doc = json.loads(healthz.stdout)
        assert doc["healthy"] is True and doc["nodeEligible"] is True, doc
        page = in_netns(proxy.node.name, "busybox", "wget", "-qO-", f"http://{METRICS}/metrics").stdout
        for name in ("kubeproxy_sync_proxy_rules_duration_seconds_count", "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
                     "kubeproxy_sync_full_proxy_rules_duration_seconds_count"):
            assert name in page, name
        mode = in_netns(proxy.node.name, "busybox", "wget", "-qO-", f"http://{METRICS}/proxyMode").stdout
        assert mode == bed.mode


async def test_a_pod_reaches_the_apiserver_through_the_kubernetes_service(bed, ns):
    """An in-cluster client, as client-go makes one: the kubernetes Service's address from the
    environment, the pod's service account token and CA. kubectl (static, from the test control
    plane's build, mounted from the host) does exactly that when it has no kubeconfig."""
    n1, _ = bed.nodes
    client = pod("incluster", ns, n1, "sleep 3600", volumeMounts=[{"name": "kbin", "mountPath": "/kbin",
                                                                   "readOnly": True}])
    client["spec"]["volumes"] = [{"name": "kbin", "hostPath": {"path": str(KUBECTL.resolve().parent),
                                                               "type": "Directory"}}]
    apply(client)
    await pods_running(ns, {"incluster"}, bed)
    last: list[tuple[int, str, str]] = []

    async def who_am_i() -> str:
        last[:] = [await exec_in(n1, ns, "incluster", "HOME=/tmp /kbin/kubectl auth whoami "
                                 "-o jsonpath='{.status.userInfo.username}'")]
        code, out, _ = last[0]
        return out.strip() if code == 0 else ""
    assert await wait_for(who_am_i, 30, "the apiserver to answer at the kubernetes Service",
                          describe=lambda: f"last answer: {last}\n{bed.describe()}") == \
        f"system:serviceaccount:{ns}:default"
    _, host, _ = await exec_in(n1, ns, "incluster", "echo $KUBERNETES_SERVICE_HOST")
    assert host.strip() == cluster_ip("default", "kubernetes")


async def test_cleanup_leaves_no_chain_or_table_behind(bed):
    n1, _ = bed.nodes
    proxy = bed.proxies[0]
    proxy.stop()
    assert "default/kubernetes" in proxy.rules(), "a stopped proxy leaves its rules in place"
    result = in_netns(n1.name, sys.executable, "-m", "pykubelet.cli", "proxy", "--cleanup", timeout=60)
    assert result.returncode == 0, result.stderr
    saved = in_netns(n1.name, "iptables-save").stdout
    assert leaked_proxy_rules(saved, in_netns(n1.name, "nft", "list", "tables").stdout) == []
    assert "PYKUBELET-POSTROUTING" in saved, "the agent's own chain must survive the proxy's cleanup"
    proxy.start()
    await wait_for(lambda: "default/kubernetes" in proxy.rules(), 30, "the proxy to program its node again",
                   describe=bed.describe)
