"""In-place pod resize through the whole pod path on the fake runtime: applied in place (pod
cgroup and UpdateContainerResources, no restart), restarted by a RestartContainer policy,
deferred when the node cannot hold it, refused below memory usage, and kept across a restart."""

from __future__ import annotations

import os

import pytest

from pykubelet.api.pod import parse_pod
from tests.unit.core.harness import Core, pod, until

pytestmark = pytest.mark.looptime
MI = 1 << 20


def sized(cpu: str, memory: str, generation: int = 1, policy: list | None = None):
    container = {"name": "app", "image": "busybox:1.36",
                 "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu, "memory": memory}}}
    if policy:
        container["resizePolicy"] = policy
    raw = pod(containers=[container]).raw
    raw["metadata"]["generation"] = generation
    return parse_pod(raw, where="test")


async def running(node) -> None:
    node.dispatcher.set_pods([sized("100m", "64Mi")], source="api")
    await until(lambda: node.status().get("phase") == "Running", what="Running")


def pod_cgroup(node, controller: str, name: str) -> int:
    path = os.path.join(node.deps.syncer.node.cgroup_root, controller, "kubepods", "poduid-web", name)
    with open(path) as f:
        return int(f.read())


async def test_cpu_and_memory_are_resized_in_place(node):
    await running(node)
    node.dispatcher.set_pods([sized("300m", "128Mi", generation=2)], source="api")
    await until(lambda: node.container().get("allocatedResources", {}).get("cpu") == "300m"
                and "PodResizeInProgress" not in {c["type"] for c in node.status()["conditions"]}
                and node.container().get("resources", {}).get("limits", {}).get("cpu") == "300m", what="resized")
    assert len(node.runtime.started("app")) == 1 and node.container()["restartCount"] == 0
    # Memory first (CPU as it was), then CPU (memory as just set).
    assert [(name, linux.memory_limit_in_bytes, linux.cpu_quota) for name, linux in node.runtime.updates] == [
        ("app", 128 * MI, 10000), ("app", 128 * MI, 30000)]
    (container,) = node.runtime.running("app")
    assert container.resources.linux.cpu_quota == 30000 and container.resources.linux.memory_limit_in_bytes == 128 * MI
    assert node.container()["resources"]["limits"] == {"cpu": "300m", "memory": "128Mi"}
    assert pod_cgroup(node, "cpu", "cpu.cfs_quota_us") == 30000
    assert pod_cgroup(node, "memory", "memory.limit_in_bytes") == 128 * MI


async def test_restart_container_policy_restarts_it(node):
    policy = [{"resourceName": "memory", "restartPolicy": "RestartContainer"}]
    node.dispatcher.set_pods([sized("100m", "64Mi", policy=policy)], source="api")
    await until(lambda: node.status().get("phase") == "Running")
    node.dispatcher.set_pods([sized("100m", "128Mi", 2, policy)], source="api")
    await until(lambda: node.container().get("restartCount") == 1 and node.container()["state"].get("running"),
                what="restarted")
    (container,) = node.runtime.running("app")
    assert container.resources.linux.memory_limit_in_bytes == 128 * MI and not node.runtime.updates


async def test_a_resize_beyond_the_node_is_deferred(node):
    await running(node)
    node.dispatcher.set_pods([sized("5", "64Mi", generation=2)], source="api")
    await until(lambda: node.condition("PodResizePending"), what="PodResizePending")
    pending = node.condition("PodResizePending")
    assert (pending["reason"], pending["observedGeneration"]) == ("Deferred", 2)
    assert pending["message"] == "Node didn't have enough resource: cpu, requested: 5000, used: 0, capacity: 4000"
    assert node.container()["allocatedResources"]["cpu"] == "100m" and not node.runtime.updates
    node.dispatcher.set_pods([sized("100m", "64Mi", generation=3)], source="api")  # taken back
    await until(lambda: not node.condition("PodResizePending"), what="no longer pending")


async def test_a_memory_limit_below_usage_is_an_error_until_it_fits(node):
    await running(node)
    node.runtime.memory_usage["app"] = 100 * MI
    pod_usage = os.path.join(node.deps.syncer.node.cgroup_root, "memory", "kubepods", "poduid-web",
                             "memory.usage_in_bytes")
    with open(pod_usage, "w") as f:
        f.write(str(20 * MI))
    node.dispatcher.set_pods([sized("100m", "32Mi", generation=2)], source="api")
    await until(lambda: node.condition("PodResizeInProgress").get("reason") == "Error", what="Error")
    assert node.condition("PodResizeInProgress")["message"] == (
        f'cannot decrease memory limits: attempting to set container "app" memory limit ({32 * MI}) '
        f"below current usage ({100 * MI})")
    with open(pod_usage, "w") as f:
        f.write(str(40 * MI))
    await until(lambda: node.condition("PodResizeInProgress")["message"].count("attempting") == 2,
                timeout=30, what="both the pod and the container refused")
    assert node.condition("PodResizeInProgress")["message"].startswith(
        f"cannot decrease memory limits: [attempting to set pod memory limit ({32 * MI}) below current usage "
        f"({40 * MI}), attempting to set container")
    assert not node.runtime.updates
    node.runtime.memory_usage["app"] = 10 * MI
    with open(pod_usage, "w") as f:
        f.write(str(10 * MI))
    await until(lambda: not node.condition("PodResizeInProgress"), timeout=60, what="retried")
    assert node.runtime.running("app")[0].resources.linux.memory_limit_in_bytes == 32 * MI


async def test_a_restarted_agent_neither_resizes_nor_restarts_again(node, tmp_path):
    await running(node)
    node.dispatcher.set_pods([sized("300m", "128Mi", generation=2)], source="api")
    await until(lambda: node.container().get("allocatedResources", {}).get("cpu") == "300m"
                and not node.condition("PodResizeInProgress"))
    await node.stop()
    updates = len(node.runtime.updates)
    again = Core(node.runtime, tmp_path).start()
    try:
        again.dispatcher.set_pods([sized("300m", "128Mi", generation=2)], source="api")
        await until(lambda: again.container().get("allocatedResources", {}).get("cpu") == "300m")
        assert len(again.runtime.updates) == updates and len(again.runtime.started("app")) == 1
    finally:
        await again.stop()


async def test_a_malformed_checkpoint_is_ignored_with_the_file_named(node, tmp_path, caplog):
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    (root / "allocated_pods_state").write_text('{"uid-web": {"app": {"requests": {"cpu": "lots"}}}, "x": 3}')
    await running(node)
    assert node.container()["allocatedResources"]["cpu"] == "100m"
    assert "allocated_pods_state" in caplog.text and "malformed" in caplog.text
