"""The kubelet API under load: pykubelet vs the real kubelet, one after the other, same run.

    python -m tests.bench.kubelet_api [--execs 20] [--log-mb 20] [--pods 30]

For each node agent, on the same containerd and control plane: (a) `kubectl exec <pod> -- true`
round trips; (b) `kubectl logs` of a pod whose log holds --log-mb MB, its wall time and the
agent's peak RSS growth while serving it (sampled every 10 ms); (c) /stats/summary latency with
--pods pods running, asked straight from the node with the apiserver's kubelet client identity.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from typing import Any

from pykubelet.config import STANDALONE_POD_CIDR
from pykubelet.cri.client import CRIClient
from pykubelet.network import assets
from tests.bench.cluster_startup import CNI_CONF_DIR, NodeAgent
from tests.bench.startup import machine, percentile
from tests.cluster.conftest import ADMIN, KUBECTL, STATE, apply, control_plane, kubectl
from tests.helpers import wait_for
from tests.runtime.conftest import BUSYBOX, ENDPOINT, remove_test_pods


def pod(name: str, namespace: str, node: str, command: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "terminationGracePeriodSeconds": 1,
                     "automountServiceAccountToken": False,
                     "containers": [{"name": "main", "image": BUSYBOX, "command": ["sh", "-c", command]}]}}


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class PeakRSS:
    """Samples a process's RSS every 10 ms in a thread until stopped."""

    def __init__(self, pid: int):
        self.pid, self.peak, self._stop = pid, rss_kib(pid), threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, rss_kib(self.pid))

    def __enter__(self) -> "PeakRSS":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def running(namespace: str, count: int) -> bool:
    items = json.loads(kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)["items"]
    return sum(1 for p in items if p["status"].get("phase") == "Running") >= count


def node_client(port: int, path: str):
    """GET path from the node as the apiserver does (its kubelet client certificate), a new
    connection each time; returns a function that times one call."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    context.load_cert_chain(STATE / "pki" / "apiserver-kubelet-client.crt", STATE / "pki" / "apiserver-kubelet-client.key")

    def get() -> float:
        start = time.perf_counter()
        with urllib.request.urlopen(f"https://127.0.0.1:{port}{path}", context=context, timeout=30) as r:
            r.read()
        return time.perf_counter() - start
    return get


async def measure(kind: str, args: argparse.Namespace, workdir: pathlib.Path) -> dict[str, Any]:
    agent = NodeAgent(kind, workdir)
    namespace = f"t-bench-api-{kind}"
    kubectl("create", "namespace", namespace, check=False)
    await wait_for(lambda: kubectl("get", "sa", "default", "-n", namespace, check=False).returncode == 0, 60,
                   "the default service account")
    agent.start()
    out: dict[str, Any] = {}
    try:
        def ready() -> bool:
            node = json.loads(kubectl("get", "node", agent.node, "-o", "json", check=False).stdout or "{}")
            conds = {c["type"]: c["status"] for c in node.get("status", {}).get("conditions", [])}
            return conds.get("Ready") == "True" and not node.get("spec", {}).get("taints")
        await wait_for(ready, 120, f"{agent.node} Ready")
        print(f"[{kind}] node Ready; starting the exec and log pods", file=sys.stderr)
        line = "0123456789abcdefghijklmnopqrstuvwxyz" * 2
        lines = args.log_mb * 1024 * 1024 // (len(line) + 1)
        size = lines * (len(line) + 1) + len("done-writing\n")
        apply([pod("shell", namespace, agent.node, "sleep 3600"),
               pod("big", namespace, agent.node, f"yes {line} | head -n {lines}; echo done-writing; sleep 3600")])
        await wait_for(lambda: running(namespace, 2), 120, "the shell and big pods Running")

        # What every exec pays before the runtime is asked: a TLS handshake with client certificate
        # and the authorization check (cached after the first), on a trivial path.
        port = json.loads(kubectl("get", "node", agent.node, "-o", "json").stdout)["status"]["daemonEndpoints"][
            "kubeletEndpoint"]["Port"]
        healthz = node_client(port, "/healthz")
        healthz()
        out["healthz"] = [healthz() for _ in range(args.execs)]
        times = []
        for _ in range(args.execs):
            start = time.perf_counter()
            kubectl("exec", "shell", "-n", namespace, "--", "true")
            times.append(time.perf_counter() - start)
        out["exec"] = times
        print(f"[{kind}] exec done; waiting for the {args.log_mb} MB log", file=sys.stderr)

        def log_complete() -> bool:
            result = subprocess.run([str(KUBECTL), "--kubeconfig", str(ADMIN), "logs", "big", "-n", namespace,
                                     "--tail=1"], capture_output=True, timeout=60)
            return result.stdout == b"done-writing\n"
        await wait_for(log_complete, 120, "the big log fully written", interval=1)
        runs = []
        for _ in range(3):
            baseline = rss_kib(agent.proc.pid)
            with PeakRSS(agent.proc.pid) as peak:
                start = time.perf_counter()
                result = subprocess.run([str(KUBECTL), "--kubeconfig", str(ADMIN), "logs", "big", "-n", namespace],
                                        stdout=subprocess.PIPE, timeout=300)
                elapsed = time.perf_counter() - start
            assert result.returncode == 0 and len(result.stdout) == size, len(result.stdout)
            del result
            runs.append((elapsed, (peak.peak - baseline) / 1024))
        out["logs"] = runs

        print(f"[{kind}] logs done; starting {args.pods} pods for /stats/summary", file=sys.stderr)
        apply([pod(f"idle-{i}", namespace, agent.node, "sleep 3600") for i in range(args.pods - 2)])
        await wait_for(lambda: running(namespace, args.pods), 300, f"{args.pods} pods Running", interval=1)
        get = node_client(port, "/stats/summary")
        get()  # warm: first scrape of every container
        out["summary"] = [get() for _ in range(20)]
    finally:
        kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        await wait_for(lambda: kubectl("get", "pods", "-n", namespace, "-o", "name", check=False).stdout == "",
                       240, "the bench pods deleted", interval=1)
        agent.stop()
        async with CRIClient(ENDPOINT) as cri:
            await remove_test_pods(cri)
    return out


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--execs", type=int, default=20)
    parser.add_argument("--log-mb", type=int, default=20)
    parser.add_argument("--pods", type=int, default=30)
    args = parser.parse_args()
    network_dir = tempfile.mkdtemp(prefix="pykubelet-bench-ipam-")
    assets.write_conflist(CNI_CONF_DIR, assets.render("pod-network.conflist", bridge="pkl0",
                                                      pod_cidr=STANDALONE_POD_CIDR, ipam_dir=network_dir))
    async with CRIClient(ENDPOINT) as cri:
        await remove_test_pods(cri)
    results = {}
    for kind in ("kubelet", "pykubelet"):
        workdir = pathlib.Path(tempfile.mkdtemp(prefix=f"pykubelet-bench-api-{kind}-"))
        try:
            results[kind] = await measure(kind, args, workdir)
        finally:
            if not os.environ.get("PYKUBELET_BENCH_KEEP"):
                shutil.rmtree(workdir, ignore_errors=True)
    shutil.rmtree(network_dir, ignore_errors=True)
    base, ours = results["kubelet"], results["pykubelet"]
    ms = lambda v: f"{v * 1e3:.0f}"  # noqa: E731
    print(f"\nThe kubelet API; {machine()}, Kubernetes v1.36.3")
    print(f"| | kubelet | pykubelet | ratio |\n|---|---:|---:|---:|")
    for label, key, q in ((f"`kubectl exec -- true` p50, ms ({args.execs} calls)", "exec", 0.5),
                          (f"`kubectl exec -- true` p95, ms", "exec", 0.95),
                          (f"/healthz on a new TLS connection p50, ms ({args.execs} calls)", "healthz", 0.5),
                          (f"/stats/summary p50, ms ({args.pods} pods, 20 calls)", "summary", 0.5),
                          (f"/stats/summary p95, ms", "summary", 0.95)):
        b, o = percentile(base[key], q), percentile(ours[key], q)
        print(f"| {label} | {ms(b)} | {ms(o)} | {o / b:.2f}× |")
    b_time = statistics.median(t for t, _ in base["logs"])
    o_time = statistics.median(t for t, _ in ours["logs"])
    print(f"| `kubectl logs` of {args.log_mb} MB, s (median of 3) | {b_time:.2f} | {o_time:.2f} | "
          f"{o_time / b_time:.2f}× |")
    print(f"| `kubectl logs` throughput, MB/s | {args.log_mb / b_time:.1f} | {args.log_mb / o_time:.1f} | "
          f"{b_time / o_time:.2f}× |")
    b_rss = max(r for _, r in base["logs"])
    o_rss = max(r for _, r in ours["logs"])
    print(f"| agent peak RSS growth while serving it, MB (max of 3) | {b_rss:.1f} | {o_rss:.1f} | |")
    return 0


if __name__ == "__main__":
    with control_plane():
        sys.exit(asyncio.run(main()))
