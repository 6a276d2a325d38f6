"""`make vagrant-test`: the project's Vagrantfile run by Vagrant itself (vagrant-libvirt, qemu's
software emulation), offline, as `make vagrant-up` runs it: the box pykubelet/debian12, the bundle
synced in, a control plane and a worker. Then the cluster a user would expect: both nodes Ready
with the Service proxy active on each; a pod resolving kubernetes.default through kubeadm's
CoreDNS and reaching it, and another node's pod, through the proxy; `systemctl restart kubelet` on
the worker restarting no pod; each node's rules for the Services in the proxy's mode (`ipvsadm -Ln`
in IPVS mode); `systemctl poweroff` of the worker with shutdownGracePeriod set, its pod stopped
gracefully and reported as the kubelet reports a pod a node shutdown ended. Finally `make vagrant-down` (vagrant
destroy -f, libvirt stopped).

Not collected by `make test` (the file name is not test_*.py): `vagrant up` of two emulated VMs
takes many minutes. PKL_PROXY_MODE picks the proxy's mode as for the Vagrantfile.
PKL_VAGRANT_REUSE=1 checks the cluster a `make vagrant-up` left running, and leaves it.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shlex
import tempfile
import time
from typing import Any, Iterator

import pytest

from tests.helpers import wait_for
from tests.vm.kubeadm_cluster import (Cluster, exec_in, resolves_kubernetes_default_and_reaches_it, restart_counts,
                                      running)
from tests.vm.vagrant import vagrant_cluster

MODE = os.environ.get("PKL_PROXY_MODE", "iptables")
REUSE = os.environ.get("PKL_VAGRANT_REUSE") == "1"
BUSYBOX = "docker.io/library/busybox:1.36"
SHUTDOWN_GRACE, SHUTDOWN_CRITICAL = 30, 10  # seconds: the worker's shutdownGracePeriod(CriticalPods)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with vagrant_cluster(1, MODE, REUSE) as made:
        yield made


def apply(cluster: Cluster, obj: dict[str, Any]) -> None:
    cluster.cp.ssh(f"echo {shlex.quote(json.dumps(obj))} | kubectl --kubeconfig /etc/kubernetes/admin.conf apply -f -",
                   timeout=120)


def pod(name: str, node: str, command: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": labels or {}},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 2, "tolerations": [{"operator": "Exists"}],
                     "containers": [{"name": "main", "image": BUSYBOX, "imagePullPolicy": "IfNotPresent",
                                     "command": ["sh", "-c", command]}]}}


async def test_every_node_is_ready_with_the_service_proxy_running(cluster: Cluster):
    for node in (cluster.cp, cluster.worker):
        await wait_for(lambda: cluster.ready(node.name), 600, f"{node.name} Ready", interval=5,
                       describe=cluster.describe)
        unit = node.ssh("systemctl is-active kube-proxy.service; grep '^mode:' /var/lib/kube-proxy/config.conf",
                        check=False).stdout.split()
        assert unit == ["active", "mode:", MODE], (node.name, unit)


async def test_a_pod_resolves_kubernetes_default_through_coredns_and_reaches_it_through_the_proxy(cluster: Cluster):
    cp, worker = cluster.cp.name, cluster.worker.name
    serve = "mkdir -p /www && echo hello-from-web > /www/index.html && exec httpd -f -p 8080 -h /www"
    apply(cluster, pod("web", cp, serve, {"app": "web"}))
    apply(cluster, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "default"},
                    "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}})
    apply(cluster, pod("client", worker, "sleep 100000"))
    await wait_for(lambda: running(cluster, ("web", "client")), 600, "the web and client pods Running",
                   interval=5, describe=cluster.describe)
    # kubeadm's CoreDNS (its pods on the control plane, reaching the apiserver through the proxy there)
    await resolves_kubernetes_default_and_reaches_it(cluster, "client")
    # a Service whose endpoint is on the other node
    await wait_for(lambda: "hello-from-web" in exec_in(cluster, "client", "timeout 5 wget -qO- http://web/"), 120,
                   "the web Service (a pod on the control plane) from the worker's pod", interval=3,
                   describe=lambda: exec_in(cluster, "client", "timeout 5 wget -O- http://web/"))


async def test_restarting_the_kubelet_on_the_worker_restarts_no_pod(cluster: Cluster):
    await wait_for(lambda: running(cluster, ("client",)), 300, "the client pod Running", interval=5,
                   describe=cluster.describe)
    before = restart_counts(cluster)
    since = time.time()
    assert cluster.worker.ssh("systemctl restart kubelet", timeout=400, check=False).returncode == 0
    await wait_for(lambda: cluster.ready(cluster.worker.name, since), 300, "pkl-w1 Ready after the restart",
                   interval=5, describe=cluster.describe)
    assert restart_counts(cluster) == before


# How each mode's rules look to an admin, and a Service address in them (the apiserver's and web's).
RULES = {"iptables": "iptables-save -t nat", "nftables": "nft list table ip kube-proxy", "ipvs": "ipvsadm -Ln"}


async def test_each_node_proxies_the_services_in_the_chosen_mode(cluster: Cluster):
    web = cluster.json("get", "service", "web")["spec"]["clusterIP"]
    for node in (cluster.cp, cluster.worker):
        rules = node.ssh(RULES[MODE], check=False)
        assert rules.returncode == 0, (node.name, rules.stderr)
        if MODE == "ipvs":  # a virtual server per Service port, its endpoint a masqueraded real server
            for service, endpoint in (("10.96.0.1:443", r"192\.168\.56\.10:6443"), (f"{web}:80", r"[0-9.]+:8080")):
                assert re.search(rf"TCP\s+{re.escape(service)} rr\s*\n\s*->\s+{endpoint}\s+Masq", rules.stdout), \
                    (node.name, service, rules.stdout)
            link = node.ssh("ip -o addr show kube-ipvs0", check=False).stdout
            assert "10.96.0.1/32" in link and f"{web}/32" in link, (node.name, link)
        else:
            assert "10.96.0.1" in rules.stdout and web in rules.stdout, (node.name, rules.stdout[-3000:])


async def test_powering_off_the_worker_ends_its_pod_as_a_node_shutdown_does(cluster: Cluster):
    worker = cluster.worker
    # kubeadm writes no shutdownGracePeriod (the kubelet's default 0 turns the feature off): set it,
    # as an admin would in the node's KubeletConfiguration
    worker.ssh(f"sed -i '/^shutdownGracePeriod/d' /var/lib/kubelet/config.yaml && "
               f"printf 'shutdownGracePeriod: {SHUTDOWN_GRACE}s\\nshutdownGracePeriodCriticalPods: "
               f"{SHUTDOWN_CRITICAL}s\\n' >> /var/lib/kubelet/config.yaml")
    since = time.time()
    assert worker.ssh("systemctl restart kubelet", timeout=400, check=False).returncode == 0
    await wait_for(lambda: cluster.ready(worker.name, since), 300, "pkl-w1 Ready with the shutdown settings",
                   interval=5, describe=cluster.describe)
    await wait_for(lambda: re.search(r"kubelet\s.*shutdown\s.*delay",
                                     worker.ssh("systemd-inhibit --list --no-pager", check=False).stdout),
                   120, "the agent's delay lock on shutdown", interval=3,
                   describe=lambda: worker.ssh("systemd-inhibit --list --no-pager", check=False).stdout)
    apply(cluster, pod("stopper", worker.name,
                       "trap 'echo got TERM; exit 0' TERM; while true; do sleep 1; done"))
    await wait_for(lambda: running(cluster, ("stopper",)), 300, "the stopper pod Running", interval=5,
                   describe=cluster.describe)

    # the worker's own account of its shutdown, up to its last moment (its journal goes with it)
    # read through a file of its own: seeking the follower's shared file description would move
    # where it writes
    with tempfile.NamedTemporaryFile("w") as last_words:
        follower = worker.follow("journalctl -f -n 0 -o cat -u kubelet", last_words)
        try:
            worker.ssh("systemctl poweroff", timeout=60, check=False)  # the connection may drop as it goes

            def ended_by_the_shutdown() -> dict[str, Any] | None:
                status = cluster.json("get", "pod", "stopper")["status"]
                return status if status.get("phase") == "Failed" else None

            def describe() -> str:
                said = pathlib.Path(last_words.name).read_text(errors="replace")
                return f"{cluster.describe()}\n--- the worker's kubelet as it shut down ---\n{said[-8000:]}"
            status = await wait_for(ended_by_the_shutdown, 300, "the stopper pod reported Failed by its node's shutdown",
                                    interval=3, describe=describe)
        finally:
            follower.kill()
            follower.wait()
    assert (status.get("reason"), status.get("message")) == (
        "Terminated", "Pod was terminated in response to imminent node shutdown."), status
    disruption = [c for c in status.get("conditions", []) if c["type"] == "DisruptionTarget"]
    assert disruption and disruption[0]["reason"] == "TerminationByKubelet", status
    # SIGTERM, answered: exit 0 within the grace period, not a SIGKILL's 137
    main = status["containerStatuses"][0]["state"]["terminated"]
    assert main["exitCode"] == 0, main
