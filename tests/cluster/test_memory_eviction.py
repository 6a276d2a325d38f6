"""Memory pressure: the node reports MemoryPressure, evicts the BestEffort pod before the
Guaranteed one (Failed, reason Evicted, the kubelet's message, an Evicted Event) and refuses a new
BestEffort pod at admission; all of it ends when the threshold goes.

No memory is used to get there: the agent is restarted with a memory.available threshold a
little above what its own Summary API measures, so the node is under pressure at once.
"""

from __future__ import annotations

import json
from typing import Any

from pykubelet.node.eviction_signals import Observation, observe
from tests.cluster.conftest import apply, kubectl, kubectl_json, node_condition, node_object
from tests.helpers import wait_for
from tests.runtime.conftest import BUSYBOX, NODE

MI = 2**20
MAX_MARGIN = 2048 * MI  # above the measured memory.available: machine noise does not lift it past that
ROOM = 256 * MI  # allocatable memory the threshold leaves: the Guaranteed pod's 64Mi and then some


TOLERATES_MEMORY_PRESSURE = [{"key": "node.kubernetes.io/memory-pressure", "operator": "Exists",
                              "effect": "NoSchedule"}]


def bare_pod(namespace: str, name: str, resources: dict[str, Any] | None = None,
             tolerations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    # spec.nodeName: straight to the node, as the scheduler would not place it on a node tainted
    # memory-pressure; what is tested is the node's own admission.
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 30, "tolerations": tolerations or [],
                     "containers": [{"name": "main", "image": BUSYBOX, "command": ["sleep", "3600"],
                                     "resources": resources or {}}]}}


def api_pod(namespace: str, name: str) -> dict[str, Any]:
    return kubectl_json("get", "pod", name, "-n", namespace)


def running(pod: dict[str, Any]) -> bool:
    statuses = pod["status"].get("containerStatuses") or []
    return pod["status"].get("phase") == "Running" and bool(statuses) and all(s.get("ready") for s in statuses)


def memory_observed() -> Observation:
    """memory.available as the eviction manager computes it, from the agent's own /stats/summary."""
    summary = json.loads(kubectl("get", "--raw", f"/api/v1/nodes/{NODE}/proxy/stats/summary").stdout)
    return observe(summary)["memory.available"]


def threshold_above(seen: Observation) -> str:
    """A threshold above what is available, in Mi (not whole Gi, so the kubelet prints it back in Mi).

    The threshold is also taken off the node's allocatable memory, and the restarted agent admits
    its pods again against that (as the kubelet does): on a quiet machine, where little is used, a
    full margin would leave no room for the Guaranteed pod, which would be rejected OutOfmemory."""
    margin = min(MAX_MARGIN, seen.capacity - seen.available - ROOM)
    assert margin > 64 * MI, f"the machine uses too little memory to set a threshold above what is free: {seen}"
    mebibytes = (seen.available + margin) // MI
    return f"{mebibytes + 1 if mebibytes % 1024 == 0 else mebibytes}Mi"


async def test_memory_pressure_evicts_best_effort_first_and_refuses_new_best_effort_pods(node_agent, namespace):
    agent = node_agent
    guaranteed = {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}}
    # The restarted agent admits its pods again, and may already see the pressure when it does: a
    # BestEffort pod that tolerates the memory-pressure taint is admitted under MemoryPressure
    # (the kubelet's rule), so what removes it is the eviction manager.
    apply([bare_pod(namespace, "best-effort", tolerations=TOLERATES_MEMORY_PRESSURE),
           bare_pod(namespace, "guaranteed", guaranteed)])
    await wait_for(lambda: all(running(api_pod(namespace, n)) for n in ("best-effort", "guaranteed")), 90,
                   "both pods Running", describe=agent.describe)
    assert api_pod(namespace, "guaranteed")["status"]["qosClass"] == "Guaranteed"
    before = api_pod(namespace, "guaranteed")["status"]["containerStatuses"][0]["containerID"]

    threshold = threshold_above(memory_observed())
    agent.stop()
    agent.start(f"--eviction-hard=memory.available<{threshold}")

    pressure = await wait_for(lambda: (c := node_condition(node_object(), "MemoryPressure")).get("status") == "True"
                              and c, 60, "MemoryPressure", describe=agent.describe)
    assert pressure["reason"] == "KubeletHasInsufficientMemory"
    evicted = await wait_for(lambda: (p := api_pod(namespace, "best-effort"))["status"].get("phase") == "Failed" and p,
                             60, "the BestEffort pod evicted", describe=agent.describe)
    status = evicted["status"]
    assert status["reason"] == "Evicted"
    message = status["message"]
    assert message.startswith(f"The node was low on resource: memory. Threshold quantity: {threshold}, available: ")
    assert "Container main was using " in message and message.endswith(
        ", request is 0, has larger consumption of memory. ")
    # The Guaranteed pod uses far less than it requests: it ranks last and still runs, untouched.
    kept = api_pod(namespace, "guaranteed")
    assert running(kept) and kept["status"]["containerStatuses"][0]["containerID"] == before

    events = kubectl_json("get", "events", "-n", namespace, "--field-selector",
                          "involvedObject.name=best-effort,reason=Evicted")["items"]
    assert [(e["type"], e["message"]) for e in events] == [("Warning", message)]

    # A new BestEffort pod (without the toleration) is refused by the node itself, in the kubelet's words.
    apply(bare_pod(namespace, "late"))
    late = await wait_for(lambda: (p := api_pod(namespace, "late"))["status"].get("phase") == "Failed" and p, 60,
                          "the new BestEffort pod rejected", describe=agent.describe)
    assert (late["status"]["reason"], late["status"]["message"]) == (
        "Evicted", "Pod was rejected: The node had condition: [MemoryPressure]. ")

    # Without the threshold the pressure is gone and BestEffort pods run again.
    agent.stop()
    agent.start()
    await wait_for(lambda: node_condition(node_object(), "MemoryPressure").get("status") == "False", 60,
                   "MemoryPressure gone without the threshold", describe=agent.describe)
    apply(bare_pod(namespace, "after"))
    await wait_for(lambda: running(api_pod(namespace, "after")), 90, "a BestEffort pod Running again",
                   describe=agent.describe)
    assert api_pod(namespace, "best-effort")["status"]["phase"] == "Failed"  # evicted for good
