"""Churn with faults: pods created and deleted in a stream while the agent is SIGKILLed (mid
sandbox/CNI ADD/StartContainer, and mid termination), its containerd is SIGKILLed and
restarted, and the apiserver goes away for a while. After it, every promise holds: no pod
restarted or started twice, none with two sandboxes at once, every deleted pod gone from the
API and the node, and nothing leaked.

The node is a network namespace with a containerd of its own (tests/multinode/conftest.py),
so its containerd can be killed without touching the machine's.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
from collections import Counter, defaultdict

from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.kube.client import KubeClient
from pykubelet.network.manager import ADD_SETTLE_SECONDS, LEAK_SWEEP_SECONDS
from pykubelet.runtime import labels
from pykubelet.tools.leaks import Node as LeakScope
from pykubelet.tools.leaks import account, not_in, report
from tests.churn import churn
from tests.cluster.conftest import ADMIN, STATE, cluster_sh
from tests.helpers import wait_for
from tests.multinode.conftest import CONTAINERD_NODE, start_node, stop_node

# CI runs a short stream with one fault of each kind; `make soak` sets PYKUBELET_CHURN_CYCLES=500.
CYCLES = int(os.environ.get("PYKUBELET_CHURN_CYCLES", "24"))
APISERVER_DOWN_SECONDS = float(os.environ.get("PYKUBELET_OUTAGE_SECONDS", "20"))


async def test_churn_with_faults_keeps_every_promise(cluster, lan, namespace, tmp_path):  # noqa: F811
    # Mounts, netns and cgroups are the machine's: what was there before the node is not its leak.
    found = await account(LeakScope(endpoints=[], root_dirs=[]))
    node = start_node("pkl-churn", "10.250.0.40", "agent", tmp_path / "churn")
    rng = random.Random(7)
    try:
        await wait_for(lambda: node.ready().get("status") == "True", 90, "the churn node Ready",
                       describe=node.describe)
        cri = node.cri()
        kube = await KubeClient.from_kubeconfig(str(ADMIN), qps=200, burst=200)

        async def kill_agent(just_created: str) -> tuple[str, set[str]]:
            await asyncio.sleep(rng.uniform(0, 0.4))  # somewhere in sandbox, CNI ADD or StartContainer
            node.agent.stop(signal.SIGKILL)
            node.agent.start()
            return "agent SIGKILLed and restarted", {just_created}

        async def kill_agent_mid_termination(just_created: str) -> tuple[str, set[str]]:
            pods = (await kube.get(f"/api/v1/namespaces/{namespace}/pods"))["items"]
            victim = next(p["metadata"]["name"] for p in pods if p["metadata"]["name"] != just_created)
            await kube.delete(f"/api/v1/namespaces/{namespace}/pods/{victim}")
            await asyncio.sleep(rng.uniform(0, 0.3))
            node.agent.stop(signal.SIGKILL)
            node.agent.start()
            return f"agent SIGKILLed while terminating {victim}", {just_created}

        async def kill_containerd(_: str) -> tuple[str, set[str]]:
            pid = int((node.state_dir / "containerd.pid").read_text())
            os.kill(pid, signal.SIGKILL)
            subprocess.run(["bash", str(CONTAINERD_NODE), "up", node.name, "--netns", node.name],
                           check=True, capture_output=True, timeout=120)
            return "containerd SIGKILLed and restarted", set()

        async def stop_apiserver(_: str) -> tuple[str, set[str]]:
            pid = int((STATE / "run" / "kube-apiserver.pid").read_text())
            os.kill(pid, signal.SIGKILL)
            await asyncio.sleep(APISERVER_DOWN_SECONDS)  # the outage itself
            cluster_sh("up", timeout=300)
            return f"apiserver down for {APISERVER_DOWN_SECONDS:.0f}s", set()

        points = sorted(rng.sample(range(2, CYCLES - 2), 4))
        faults = dict(zip(points, (kill_agent, kill_containerd, kill_agent_mid_termination, stop_apiserver)))
        two_sandboxes: set[str] = set()
        instances: dict[tuple[str, str], set[str]] = defaultdict(set)  # (pod, container) -> IDs seen running
        restarts: dict[str, int] = {}

        async def look() -> None:
            ready = Counter(s.metadata.uid for s in await cri.list_pod_sandbox() if s.state == api.SANDBOX_READY)
            two_sandboxes.update(uid for uid, n in ready.items() if n > 1)
            for c in await cri.list_containers():
                if c.state == api.CONTAINER_RUNNING:  # one that was created but never ran is not a start
                    instances[(c.labels[labels.POD_NAME], c.metadata.name)].add(c.id)
            for pod in (await kube.get(f"/api/v1/namespaces/{namespace}/pods"))["items"]:
                for status in pod.get("status", {}).get("containerStatuses", []):
                    restarts[pod["metadata"]["name"]] = max(restarts.get(pod["metadata"]["name"], 0),
                                                            status.get("restartCount", 0))

        result = await churn(kube, namespace, node.name, CYCLES, faults=faults, on_cycle=look)
        print("\n".join(result.faults))

        assert not two_sandboxes, f"pods with two ready sandboxes at once: {sorted(two_sandboxes)}"
        assert not {k: v for k, v in instances.items() if len(v) > 1}, "a container was started twice"
        unexplained = {name: n for name, n in restarts.items() if n > (1 if name in result.disturbed else 0)}
        assert not unexplained, f"restarts no fault explains: {unexplained} (faults: {result.faults})"

        async def node_has_no_pods() -> bool:
            return not await cri.list_pod_sandbox() and not await cri.list_containers()
        await wait_for(node_has_no_pods, 120, "the node to remove every churned pod", describe=node.describe)
        scope = LeakScope(endpoints=[node.endpoint], root_dirs=[str(node.agent.workdir / "root")],
                          pod_logs_dir=str(node.agent.logs_dir), host_netns=node.name)
        leaks: list = []

        async def nothing_leaked() -> bool:
            nonlocal leaks
            leaks = not_in(await account(scope), found)
            return not leaks
        # What a fault cut short (a DEL that came while the agent was restarting, a sandbox the
        # killed containerd never stored) is released by the running agent's sweep, once its
        # records have settled (network/manager.py).
        settle = ADD_SETTLE_SECONDS + 2 * LEAK_SWEEP_SECONDS + 10
        await wait_for(nothing_leaked, settle, "the running agent to release what the faults left", interval=2,
                       describe=lambda: report(leaks))
        await kube.close()
        await cri.close()
    finally:
        stop_node(node)
