"""Pod startup on a real control plane: pykubelet vs the real kubelet, one after the other.

    python -m tests.bench.cluster_startup [--pods 20] [--batch 30] [--exits 10]

For each node agent, on the same containerd and control plane (the real scheduler places the
pods on the only Ready node): (a) API create -> Running seen by a watch, pods one by one;
(b) a batch created at once, each pod's latency from its own create; (c) a container killed
(SIGKILL of its process) -> the pod's status change seen by the watch.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import asyncio
import json
import os
import pathlib
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import yaml

from pykubelet.config import STANDALONE_POD_CIDR
from pykubelet.cri.client import CRIClient
from pykubelet.kube.client import KubeClient
from pykubelet.kube.reflector import Objects, Reflector
from pykubelet.network import assets
from pykubelet.runtime import labels
from tests import kubelet_chains
from tests.bench.startup import machine, percentile
from tests.conformance.owned import make_cgroup_root, remove_cgroup_root
from tests.cluster.conftest import ADMIN, STATE, cluster_sh, control_plane, kubectl
from tests.helpers import wait_for
from tests.runtime.conftest import BUSYBOX, ENDPOINT, free_port, remove_test_pods

CNI_CONF_DIR = "/etc/cni/net.d"  # the test bed containerd's
# The real kubelet kills what runs in pod cgroups under its cgroupRoot that it does not know. Under
# the default root that is every other agent's pods on the machine (a conformance cluster's, the
# kubeadm tier's): the benchmarks' kubelet gets a root of its own, as the conformance beds' do.
KUBELET_CGROUP_ROOT = "/pkl-bench-kubelet"

BIN = pathlib.Path(os.environ.get("PYKUBELET_CACHE", "/var/cache/pykubelet")) / "k8s" / "v1.36.3" / "bin"


def pod(name: str, namespace: str, command: str = "sleep 3600") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                     "automountServiceAccountToken": False,
                     "containers": [{"name": "main", "image": BUSYBOX, "imagePullPolicy": "IfNotPresent",
                                     "command": ["sh", "-c", command]}]}}


class Watcher:
    """Times when each pod is first seen Running, and first seen with a terminated container.

    Through the project's reflector, so a watch the apiserver ends or breaks under load is
    resumed (or relisted) instead of silently ending the measurement.
    """

    def __init__(self, kube: KubeClient, namespace: str):
        self.kube, self.namespace = kube, namespace
        self.running_at: dict[str, float] = {}
        self.terminated_at: dict[str, float] = {}

    def _seen(self, pods: Objects) -> None:
        now = time.perf_counter()
        for obj in pods.values():
            name = obj["metadata"]["name"]
            status = obj.get("status", {})
            if status.get("phase") == "Running":
                self.running_at.setdefault(name, now)
            if any("terminated" in c.get("state", {}) for c in status.get("containerStatuses", [])):
                self.terminated_at.setdefault(name, now)

    async def run(self) -> None:
        await Reflector(self.kube, f"/api/v1/namespaces/{self.namespace}/pods", {}, self._seen, "bench pods").run()


DEVICE_PLUGINS = "/var/lib/kubelet/device-plugins"  # the real kubelet makes it whatever its --root-dir
POD_LOGS = "/var/log/pods"
BENCH_NAMESPACE_PREFIX = "t-"  # every bench namespace: t-bench-*, t-density-*, t-churn-*


class NodeAgent:
    """One node agent process joined as node `name`."""

    def __init__(self, kind: str, workdir: pathlib.Path, standalone: bool = False, max_pods: int | None = None,
                 probe: dict[str, str] | None = None):
        self.kind, self.workdir, self.standalone = kind, workdir, standalone
        self.max_pods = max_pods  # None: each agent's default (110)
        self.probe = probe  # pykubelet only: run under tests/bench/agent_probe.py with this environment
        self.node = f"bench-{kind}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.healthz_port = free_port()  # /healthz on http://127.0.0.1:<port>, for either agent
        self.started_at = 0.0  # perf_counter() at the exec

    def start(self) -> None:
        kubeconfig = self.workdir / "node.kubeconfig"
        if not self.standalone:
            cluster_sh("node-kubeconfig", self.node, str(kubeconfig))
        root = self.workdir / "root"
        manifests = self.workdir / "manifests"
        manifests.mkdir(parents=True, exist_ok=True)
        if self.kind == "kubelet":
            config = self.workdir / "kubelet.yaml"
            config.write_text(yaml.safe_dump({
                "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
                "cgroupDriver": "cgroupfs", "failSwapOn": False, "failCgroupV1": False,
                "cgroupRoot": KUBELET_CGROUP_ROOT, "staticPodPath": str(manifests), "containerRuntimeEndpoint": ENDPOINT,
                # Webhook authn/authz need an apiserver: a standalone kubelet refuses to start with them.
                "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": not self.standalone},
                                   "x509": {"clientCAFile": str(STATE / "pki" / "ca.crt")}},
                "authorization": {"mode": "AlwaysAllow" if self.standalone else "Webhook"},
                "port": free_port(), "healthzPort": self.healthz_port,
                "readOnlyPort": 0, **({"maxPods": self.max_pods} if self.max_pods else {})}))
            make_cgroup_root(KUBELET_CGROUP_ROOT)
            # --cert-dir does not follow --root-dir; the device plugin dir is fixed: note whether it was there.
            self.made_device_plugins = not os.path.exists(DEVICE_PLUGINS)
            self.made_chains = kubelet_chains.absent()  # it makes its iptables chains in this netns
            argv = [str(BIN / "kubelet"), "--config", str(config), "--root-dir", str(root),
                    "--cert-dir", str(root / "pki"), "--hostname-override", self.node]
        else:
            argv = [sys.executable, "-m", "tests.bench.agent_probe" if self.probe else "pykubelet.cli",
                    "--pod-manifest-path", str(manifests), "--root-dir", str(root),
                    "--hostname-override", self.node, "--healthz-port", str(self.healthz_port), "--port", str(free_port()),
                    "--client-ca-file", str(STATE / "pki" / "ca.crt"),  # the apiserver's identity, as the kubelet's
                    "--network-mode", "runtime"]  # the same containerd-run network as the kubelet's
            if self.max_pods:
                argv += ["--max-pods", str(self.max_pods)]
        if not self.standalone:
            argv += ["--kubeconfig", str(kubeconfig)]
        log = open(self.workdir / f"{self.kind}.log", "ab")
        self.started_at = time.perf_counter()
        env = {**os.environ, **self.probe} if self.probe and self.kind != "kubelet" else None
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)

    def check_alive(self) -> None:
        """Fail at once, with its log, when the agent has exited (instead of waiting out a deadline)."""
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"{self.kind} exited with {self.proc.returncode}:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join((self.workdir / f"{self.kind}.log").read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not self.standalone:
            kubectl("delete", "node", self.node, "--wait=false", check=False)
        root = self.workdir / "root"
        subprocess.run(["umount", "-R", str(root)], capture_output=True)  # the real kubelet bind-mounts it
        if self.kind == "kubelet":
            remove_cgroup_root(KUBELET_CGROUP_ROOT)
            kubelet_chains.remove(getattr(self, "made_chains", set()))
            if getattr(self, "made_device_plugins", False):
                shutil.rmtree(DEVICE_PLUGINS, ignore_errors=True)
                with contextlib.suppress(OSError):
                    os.rmdir(os.path.dirname(DEVICE_PLUGINS))  # /var/lib/kubelet, if nothing else is in it
            # The real kubelet leaves the log directories of the pods it ran until its next GC.
            for entry in glob.glob(os.path.join(POD_LOGS, f"{BENCH_NAMESPACE_PREFIX}*")):
                shutil.rmtree(entry, ignore_errors=True)
        # Static pods (<ns>_<name>-<node>_<uid>) are removed through CRI once the agent is stopped,
        # so no agent removes their log directories: the bench does.
        for entry in glob.glob(os.path.join(POD_LOGS, f"*_*-{self.node}_*")):
            shutil.rmtree(entry, ignore_errors=True)


def ready_untainted(node_name: str) -> bool:
    node = json.loads(kubectl("get", "node", node_name, "-o", "json", check=False).stdout or "{}")
    conds = {c["type"]: c["status"] for c in node.get("status", {}).get("conditions", [])}
    return conds.get("Ready") == "True" and not node.get("spec", {}).get("taints")


async def measure(kind: str, kube: KubeClient, cri: CRIClient, args: argparse.Namespace,
                  workdir: pathlib.Path) -> dict[str, list[float]]:
    agent = NodeAgent(kind, workdir)
    namespace = f"t-bench-{kind}"
    kubectl("create", "namespace", namespace, check=False)
    await wait_for(lambda: kubectl("get", "sa", "default", "-n", namespace, check=False).returncode == 0, 60,
                   "the default service account")
    agent.start()
    watcher = Watcher(kube, namespace)
    watch = asyncio.create_task(watcher.run())
    results: dict[str, list[float]] = {"one by one": [], "batch": [], "exit -> status": []}
    path = f"/api/v1/namespaces/{namespace}/pods"
    try:
        await wait_for(lambda: ready_untainted(agent.node), 120, f"{agent.node} Ready without taints")
        for i in range(args.pods):
            start = time.perf_counter()
            await kube.create(path, pod(f"one-{i}", namespace))
            await wait_for(lambda: f"one-{i}" in watcher.running_at, 60, f"one-{i} Running", interval=0.005)
            results["one by one"].append(watcher.running_at[f"one-{i}"] - start)
        created: dict[str, float] = {}

        async def create(i: int) -> None:
            created[f"batch-{i}"] = time.perf_counter()
            await kube.create(path, pod(f"batch-{i}", namespace))
        await asyncio.gather(*(create(i) for i in range(args.batch)))
        await wait_for(lambda: all(n in watcher.running_at for n in created), 180, "the batch Running",
                       interval=0.01)
        results["batch"] = [watcher.running_at[n] - t for n, t in created.items()]
        for i in range(args.exits):
            name = f"one-{i}"
            (container,) = await cri.list_containers({labels.POD_NAME: name, labels.POD_NAMESPACE: namespace})
            info = json.loads((await cri.container_status(container.id, verbose=True)).info["info"])
            start = time.perf_counter()
            os.kill(info["pid"], signal.SIGKILL)
            await wait_for(lambda: name in watcher.terminated_at, 60, f"{name} terminated", interval=0.005)
            results["exit -> status"].append(watcher.terminated_at[name] - start)
    finally:
        watch.cancel()
        kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        await wait_for(lambda: kubectl("get", "pods", "-n", namespace, "-o", "name", check=False).stdout == "",
                       180, "the bench pods deleted")
        agent.stop()
        await remove_test_pods(cri)
    return results


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, default=20)
    parser.add_argument("--batch", type=int, default=30)
    parser.add_argument("--exits", type=int, default=10)
    args = parser.parse_args()
    args.exits = min(args.exits, args.pods)  # the exits are measured on the one-by-one pods
    # Both agents get the same network, run by containerd (pykubelet in runtime mode).
    network_dir = tempfile.mkdtemp(prefix="pykubelet-bench-ipam-")
    assets.write_conflist(CNI_CONF_DIR, assets.render("pod-network.conflist", bridge="pkl0",
                                                      pod_cidr=STANDALONE_POD_CIDR, ipam_dir=network_dir))
    kube = await KubeClient.from_kubeconfig(str(ADMIN), qps=1000, burst=1000)
    by_agent = {}
    async with CRIClient(ENDPOINT) as cri:
        await remove_test_pods(cri)
        for kind in ("kubelet", "pykubelet"):
            workdir = pathlib.Path(tempfile.mkdtemp(prefix=f"pykubelet-bench-{kind}-"))
            try:
                by_agent[kind] = await measure(kind, kube, cri, args, workdir)
            finally:
                if not os.environ.get("PYKUBELET_BENCH_KEEP"):
                    shutil.rmtree(workdir, ignore_errors=True)
    await kube.close()
    shutil.rmtree(network_dir, ignore_errors=True)
    print(f"\nPod startup on a real control plane (ms); {machine()}, Kubernetes v1.36.3")
    print(f"{'':34} {'kubelet p50':>12} {'p99':>8} {'pykubelet p50':>14} {'p99':>8} {'p50 ratio':>10}")
    for metric in by_agent["kubelet"]:
        base, ours = by_agent["kubelet"][metric], by_agent["pykubelet"][metric]
        label = {"one by one": f"create -> Running, {args.pods} one by one",
                 "batch": f"create -> Running, batch of {args.batch}",
                 "exit -> status": f"container killed -> status, {args.exits}"}[metric]
        print(f"{label:34} {statistics.median(base) * 1e3:12.0f} {percentile(base, 0.99) * 1e3:8.0f} "
              f"{statistics.median(ours) * 1e3:14.0f} {percentile(ours, 0.99) * 1e3:8.0f} "
              f"{statistics.median(ours) / statistics.median(base):9.2f}x")
    return 0


if __name__ == "__main__":
    with control_plane():
        sys.exit(asyncio.run(main()))
