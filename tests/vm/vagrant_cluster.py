"""`make vagrant-test`: the project's Vagrantfile run by Vagrant itself (vagrant-libvirt, qemu's
software emulation), offline, as `make vagrant-up` runs it: the box pykubelet/debian12, the bundle
synced in, a control plane and a worker. Then the cluster a user would expect: both nodes Ready
with the Service proxy active on each; a pod resolving kubernetes.default through kubeadm's
CoreDNS and reaching it, and another node's pod, through the proxy; `systemctl restart kubelet` on
the worker restarting no pod. Finally `make vagrant-down` (vagrant destroy -f, libvirt stopped).

Not collected by `make test` (the file name is not test_*.py): `vagrant up` of two emulated VMs
takes many minutes. PKL_PROXY_MODE picks the proxy's mode as for the Vagrantfile.
PKL_VAGRANT_REUSE=1 checks the cluster a `make vagrant-up` left running, and leaves it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.helpers import wait_for
from tests.progress import say
from tests.vm.kubeadm_cluster import Cluster, restart_counts, running
from tests.vm.machine import REPO

VAGRANT_SH = REPO / "tests" / "bed" / "vagrant.sh"
MODE = os.environ.get("PKL_PROXY_MODE", "iptables")
REUSE = os.environ.get("PKL_VAGRANT_REUSE") == "1"
BUSYBOX = "docker.io/library/busybox:1.36"


@dataclass
class VagrantNode:
    """A machine of the Vagrantfile, reached with the SSH settings `vagrant ssh-config` gives."""
    name: str
    """The Node's name (the VM's hostname)."""
    host: str
    """Vagrant's name for the machine (cp, w1)."""
    ip: str
    ssh_config: Path

    def ssh(self, command: str, timeout: float = 300, check: bool = True,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """`command` as root, as `vagrant ssh -c 'sudo ...'` runs it (Machine.ssh's interface)."""
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items())
        remote = f"sudo {'env ' + exports if exports else ''} bash -c {shlex.quote(command)}"
        argv = ["ssh", "-q", "-F", str(self.ssh_config), "-o", "BatchMode=yes", "-o", "ServerAliveInterval=15",
                self.host, remote]
        try:
            result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            if not check:
                return subprocess.CompletedProcess(argv, 124, "", "timed out")
            raise AssertionError(f"{self.host}: `{command}` timed out after {timeout:.0f}s") from None
        if check and result.returncode != 0:
            raise AssertionError(f"{self.host}: `{command}` failed ({result.returncode}):\n"
                                 f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
        return result


def vagrant_sh(action: str, log: Path, timeout: float) -> float:
    """tests/bed/vagrant.sh ACTION with its output in LOG; seconds taken. Raises with the log's tail.
    Out of time, its whole process group goes (a `vagrant up` left running would hold Vagrant's
    lock on the machines, and the `down` that follows could not destroy them)."""
    started = time.monotonic()
    with open(log, "ab") as out:
        proc = subprocess.Popen(["bash", str(VAGRANT_SH), action], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                env={**os.environ, "PYTHON": sys.executable})
        try:
            returncode = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise AssertionError(f"vagrant.sh {action}: not done after {timeout:.0f}s:\n{log.read_text()[-6000:]}") \
                from None
    if returncode != 0:
        raise AssertionError(f"vagrant.sh {action} failed ({returncode}):\n{log.read_text()[-6000:]}")
    return time.monotonic() - started


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    work = Path(tempfile.mkdtemp(prefix="pkl-vagrant-test."))
    log = work / "vagrant.log"
    try:
        if not REUSE:
            say("vagrant", f"make vagrant-up: libvirt, the box, the bundle, `vagrant up` of cp and w1 "
                           f"(proxy mode {MODE}; tens of minutes under emulation; log {log})")
            took = vagrant_sh("up", log, 5400)
            say("vagrant", f"vagrant-up took {took:.0f} s")
        config = work / "ssh-config"
        config.write_text(subprocess.run(["vagrant", "ssh-config"], cwd=REPO / "vagrant", capture_output=True,
                                         text=True, check=True, timeout=300).stdout)
        yield Cluster(VagrantNode("pkl-cp", "cp", "192.168.56.10", config),
                      VagrantNode("pkl-w1", "w1", "192.168.56.11", config))
    finally:
        try:
            if not REUSE:
                say("vagrant", "make vagrant-down: vagrant destroy -f, libvirt stopped")
                vagrant_sh("down", log, 900)
        finally:
            subprocess.run(["rm", "-rf", str(work)], check=False)


def apply(cluster: Cluster, obj: dict[str, Any]) -> None:
    cluster.cp.ssh(f"echo {shlex.quote(json.dumps(obj))} | kubectl --kubeconfig /etc/kubernetes/admin.conf apply -f -",
                   timeout=120)


def exec_in(cluster: Cluster, pod: str, command: str) -> str:
    return cluster.kubectl("exec", pod, "--", "sh", "-c", shlex.quote(command), check=False)


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
    lookup = await wait_for(lambda: (lambda out: out if re.search(r"Address:?\s+10\.96\.0\.1\b", out) else None)(
        exec_in(cluster, "client", "nslookup kubernetes.default.svc.cluster.local")), 600,
        "CoreDNS resolving kubernetes.default from the worker's pod", interval=5, describe=cluster.describe)
    assert "10.96.0.10" in lookup, lookup  # asked the kube-dns Service
    # the short name through the pod's search path, to the apiserver through the worker's proxy
    out = exec_in(cluster, "client", "nc -w 5 kubernetes.default 443 </dev/null && echo connected")
    assert "connected" in out, out
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
