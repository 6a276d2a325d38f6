"""On a real control plane and containerd: `kubectl patch --subresource resize` changes a running
container's CPU and memory in place (its cgroup files show the new values, restartCount stays
0), a RestartContainer policy restarts it, and a resize that does not fit next to the other pods
stays pending (Deferred)."""

from __future__ import annotations

import json
import os

from pykubelet.api.quantity import cpu_millis
from tests.cluster.conftest import apply, kubectl, kubectl_json
from tests.runtime.conftest import NODE
from tests.cluster.test_podspec_api import get_pod, pod, running
from tests.helpers import wait_for

MI = 1 << 20


def resized(namespace: str, name: str, cpu: str, memory: str) -> None:
    body = {"spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": cpu, "memory": memory},
                                                                  "limits": {"cpu": cpu, "memory": memory}}}]}}
    kubectl("-n", namespace, "patch", "pod", name, "--subresource", "resize", "--type", "strategic",
            "-p", json.dumps(body))


def guaranteed(namespace: str, name: str, policy: list | None = None) -> dict:
    spec = pod(namespace, name, "sleep 3600",
               resources={"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}})
    if policy:
        spec["spec"]["containers"][0]["resizePolicy"] = policy
    return spec


async def cgroup_values(cri, container_id: str) -> tuple[int, int]:
    """(cpu.cfs_quota_us, memory.limit_in_bytes) of the container's cgroup (v1), found from its pid."""
    info = json.loads((await cri.container_status(container_id, verbose=True)).info["info"])
    with open(f"/proc/{info['pid']}/cgroup") as f:
        paths = dict((line.split(":")[1], line.split(":")[2].strip()) for line in f if line.count(":") >= 2)
    cpu = next(path for controllers, path in paths.items() if "cpu" in controllers.split(","))
    memory = paths["memory"]
    cpu_dir = next(os.path.join("/sys/fs/cgroup", d, cpu.lstrip("/")) for d in ("cpu,cpuacct", "cpu")
                   if os.path.isdir(os.path.join("/sys/fs/cgroup", d, cpu.lstrip("/"))))
    with open(os.path.join(cpu_dir, "cpu.cfs_quota_us")) as f:
        quota = int(f.read())
    with open(os.path.join("/sys/fs/cgroup/memory", memory.lstrip("/"), "memory.limit_in_bytes")) as f:
        return quota, int(f.read())


def container_status(namespace: str, name: str) -> dict:
    return ((get_pod(namespace, name) or {}).get("status", {}).get("containerStatuses") or [{}])[0]


def conditions(namespace: str, name: str) -> dict[str, dict]:
    return {c["type"]: c for c in (get_pod(namespace, name) or {}).get("status", {}).get("conditions") or []}


async def test_cpu_and_memory_are_resized_in_place(node_agent, cri, namespace):
    apply(guaranteed(namespace, "inplace"))
    await wait_for(lambda: running(namespace, "inplace"), 60, "the pod running", describe=node_agent.describe, interval=0.5)
    container_id = container_status(namespace, "inplace")["containerID"].split("://")[1]
    assert await cgroup_values(cri, container_id) == (10000, 64 * MI)
    resized(namespace, "inplace", "300m", "128Mi")

    async def applied() -> bool:
        return await cgroup_values(cri, container_id) == (30000, 128 * MI)
    await wait_for(applied, 60, "the new cgroup values", describe=node_agent.describe, interval=0.5)
    await wait_for(lambda: "PodResizeInProgress" not in conditions(namespace, "inplace")
                   and container_status(namespace, "inplace").get("allocatedResources", {}).get("cpu") == "300m",
                   60, "the resize completed", describe=node_agent.describe, interval=0.5)
    status = container_status(namespace, "inplace")
    assert status["restartCount"] == 0 and status["containerID"].endswith(container_id)
    assert status["resources"]["limits"] == {"cpu": "300m", "memory": "128Mi"}


async def test_restart_container_policy_restarts_it_for_memory(node_agent, cri, namespace):
    apply(guaranteed(namespace, "restarted", [{"resourceName": "memory", "restartPolicy": "RestartContainer"}]))
    await wait_for(lambda: running(namespace, "restarted"), 60, "the pod running", describe=node_agent.describe, interval=0.5)
    resized(namespace, "restarted", "100m", "128Mi")
    await wait_for(lambda: container_status(namespace, "restarted").get("restartCount") == 1
                   and running(namespace, "restarted"), 90, "the restart", describe=node_agent.describe, interval=0.5)
    container_id = container_status(namespace, "restarted")["containerID"].split("://")[1]
    assert (await cgroup_values(cri, container_id))[1] == 128 * MI


async def test_more_cpu_than_is_free_stays_pending_as_deferred(node_agent, namespace):
    # The apiserver itself refuses a resize beyond the node's allocatable ("node didn't have
    # enough allocatable resources"); the kubelet's part is a resize that fits the node but not
    # next to the other pods.
    allocatable = cpu_millis(kubectl_json("get", "node", NODE)["status"]["allocatable"]["cpu"])
    hog = pod(namespace, "hog", "sleep 3600", resources={"requests": {"cpu": f"{allocatable - 500}m"}})
    apply([guaranteed(namespace, "toobig"), hog])
    for name in ("toobig", "hog"):
        await wait_for(lambda name=name: running(namespace, name), 60, f"{name} running", describe=node_agent.describe,
                       interval=0.5)
    resized(namespace, "toobig", "600m", "64Mi")
    await wait_for(lambda: conditions(namespace, "toobig").get("PodResizePending", {}).get("reason") == "Deferred",
                   60, "PodResizePending", describe=node_agent.describe, interval=0.5)
    pending = conditions(namespace, "toobig")["PodResizePending"]
    assert pending["message"].startswith("Node didn't have enough resource: cpu, requested: 600, used: ")
    assert pending["message"].endswith(f", capacity: {allocatable}") and pending["observedGeneration"] == 2
    assert container_status(namespace, "toobig")["allocatedResources"]["cpu"] == "100m"
    assert container_status(namespace, "toobig")["restartCount"] == 0
