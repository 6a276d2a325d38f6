"""Pod churn through the apiserver: create one pod, delete the oldest, keep a window of pods
alive, over many cycles; optionally with faults injected between steps. Used by the churn test
(tests/multinode/test_churn.py: faults, then every promise checked) and the churn benchmark
(tests/bench/churn.py: pykubelet vs the real kubelet, no faults).

The pods mix what a node does for a pod: restart policies, probes, init containers, emptyDir,
configMap volumes, hostPort. None of them ever needs a restart, so any restart or second
container instance is the agent's doing.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from pykubelet.kube import errors
from pykubelet.kube.client import KubeClient
from tests.helpers import wait_for

BUSYBOX = "docker.io/library/busybox:1.36"


def churn_pod(name: str, namespace: str, node: str, kind: int) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": BUSYBOX, "command": ["sh", "-c", "sleep 3600"]}
    spec: dict[str, Any] = {"nodeSelector": {"kubernetes.io/hostname": node}, "terminationGracePeriodSeconds": 1,
                            "automountServiceAccountToken": False, "containers": [container],
                            "tolerations": [{"operator": "Exists"}]}  # ride out NotReady during faults
    match kind % 6:
        case 0:
            spec["restartPolicy"] = "OnFailure"
        case 1:
            container["readinessProbe"] = {"exec": {"command": ["true"]}, "periodSeconds": 2}
            container["livenessProbe"] = {"exec": {"command": ["true"]}, "periodSeconds": 5, "failureThreshold": 6}
        case 2:
            spec["initContainers"] = [{"name": "init", "image": BUSYBOX, "command": ["true"]}]
        case 3:
            spec["volumes"] = [{"name": "scratch", "emptyDir": {}}]
            container["volumeMounts"] = [{"name": "scratch", "mountPath": "/scratch"}]
        case 4:
            spec["volumes"] = [{"name": "conf", "configMap": {"name": "churn"}}]
            container["volumeMounts"] = [{"name": "conf", "mountPath": "/conf"}]
        case 5:
            container["ports"] = [{"containerPort": 8080, "hostPort": 30000 + int(name.rsplit("-", 1)[1]) % 2000}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


@dataclass
class ChurnResult:
    cycles: int = 0
    seconds: float = 0.0
    created: list[str] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)
    disturbed: set[str] = field(default_factory=set)
    """Pods a fault may explain a restart of: those being started when the agent was killed."""

    @property
    def cycles_per_minute(self) -> float:
        return 60 * self.cycles / self.seconds if self.seconds else 0.0


Fault = Callable[[str], Awaitable[tuple[str, set[str]]]]
"""Given the pod just created, does its damage; says what it did and which pods it may have
caught mid-start (a container whose start the agent's death cut off is created anew, with
restartCount 1, as the kubelet does)."""


async def delete_pod(kube: KubeClient, path: str) -> None:
    try:
        await kube.delete(path)
    except errors.NotFound:
        pass  # a fault already deleted it


async def churn(kube: KubeClient, namespace: str, node: str, cycles: int, window: int = 4,
                faults: dict[int, Fault] | None = None, seed: int = 1,
                on_cycle: Callable[[], Awaitable[None]] | None = None) -> ChurnResult:
    """Run the cycles; `faults[i]` runs right after cycle i's create (so the agent is mid
    sandbox/CNI/start) and returns what it did. Each pod must reach Running in 120 s;
    `on_cycle` checks whatever it wants after each."""
    rng = random.Random(seed)
    path = f"/api/v1/namespaces/{namespace}/pods"
    await kube.create(f"/api/v1/namespaces/{namespace}/configmaps",
                      {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "churn"}, "data": {"k": "v"}})
    result = ChurnResult()
    alive: list[str] = []
    start = time.perf_counter()
    for i in range(cycles):
        name = f"churn-{i}"
        await kube.create(path, churn_pod(name, namespace, node, rng.randrange(6)))
        result.created.append(name)
        alive.append(name)
        if faults and i in faults:
            what, disturbed = await faults[i](name)
            result.faults.append(f"cycle {i}: {what}")
            result.disturbed |= disturbed

        async def running(name: str = name) -> bool:
            try:
                return (await kube.get(f"{path}/{name}")).get("status", {}).get("phase") == "Running"
            except errors.KubeError:
                return False
        await wait_for(running, 120, f"pod {name} Running", interval=0.1)
        if len(alive) > window:
            await delete_pod(kube, f"{path}/{alive.pop(0)}")
        if on_cycle:
            await on_cycle()
        result.cycles += 1
        if (i + 1) % 10 == 0:
            print(f"  churn: {i + 1}/{cycles} cycles, {time.perf_counter() - start:.0f}s", flush=True)
    for name in alive:
        await delete_pod(kube, f"{path}/{name}")

    async def all_gone() -> bool:
        return not (await kube.get(path) or {}).get("items")
    await wait_for(all_gone, 300, "every churned pod gone from the API", interval=0.5)
    result.seconds = time.perf_counter() - start
    return result
