"""Pod churn: create one pod, delete the oldest, over many cycles (tests/churn.py) — pykubelet
vs the real kubelet in the same run, same containerd, no faults.

    python -m tests.bench.churn [--cycles 100]
"""

from __future__ import annotations

import argparse
import asyncio
import pathlib
import shutil
import sys
import tempfile

from pykubelet.config import STANDALONE_POD_CIDR
from pykubelet.cri.client import CRIClient
from pykubelet.kube.client import KubeClient
from pykubelet.network import assets
from tests.bench.cluster_startup import CNI_CONF_DIR, NodeAgent, ready_untainted
from tests.bench.density import cpu_seconds
from tests.bench.startup import machine
from tests.churn import churn
from tests.cluster.conftest import ADMIN, control_plane, kubectl
from tests.helpers import wait_for
from tests.runtime.conftest import ENDPOINT, remove_test_pods


async def measure(kind: str, kube: KubeClient, cycles: int, workdir: pathlib.Path) -> tuple[float, float]:
    """(cycles per minute, agent CPU seconds per cycle)."""
    agent = NodeAgent(kind, workdir)
    namespace = f"t-churn-{kind}"
    kubectl("create", "namespace", namespace, check=False)
    await wait_for(lambda: kubectl("get", "sa", "default", "-n", namespace, check=False).returncode == 0, 60,
                   "the default service account")
    agent.start()
    try:
        await wait_for(lambda: ready_untainted(agent.node), 120, f"{agent.node} Ready without taints")
        cpu = cpu_seconds(agent.proc.pid)
        print(f"  {kind}: {cycles} churn cycles", flush=True)
        result = await churn(kube, namespace, agent.node, cycles)
        return result.cycles_per_minute, (cpu_seconds(agent.proc.pid) - cpu) / cycles
    finally:
        kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        agent.stop()


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cycles", type=int, default=100)
    args = parser.parse_args()
    network_dir = tempfile.mkdtemp(prefix="pykubelet-bench-ipam-")
    assets.write_conflist(CNI_CONF_DIR, assets.render("pod-network.conflist", bridge="pkl0",
                                                      pod_cidr=STANDALONE_POD_CIDR, ipam_dir=network_dir))
    kube = await KubeClient.from_kubeconfig(str(ADMIN), qps=1000, burst=1000)
    results = {}
    async with CRIClient(ENDPOINT) as cri:
        for kind in ("kubelet", "pykubelet"):
            await remove_test_pods(cri)
            workdir = pathlib.Path(tempfile.mkdtemp(prefix=f"pykubelet-churn-{kind}-"))
            try:
                results[kind] = await measure(kind, kube, args.cycles, workdir)
            finally:
                shutil.rmtree(workdir, ignore_errors=True)
        await remove_test_pods(cri)
    await kube.close()
    shutil.rmtree(network_dir, ignore_errors=True)
    print(f"\nPod churn, {args.cycles} create/delete cycles through the API; {machine()}, Kubernetes v1.36.3")
    print(f"{'':32} {'kubelet':>10} {'pykubelet':>10} {'ratio':>8}")
    for i, label in enumerate(("cycles per minute", "agent CPU seconds per cycle")):
        base, ours = results["kubelet"][i], results["pykubelet"][i]
        print(f"{label:32} {base:10.2f} {ours:10.2f} {ours / base:7.2f}x")
    return 0


if __name__ == "__main__":
    with control_plane():
        sys.exit(asyncio.run(main()))
