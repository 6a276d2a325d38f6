"""In-place resize decisions (pods/resize.py): allocation, admission, the plan for running containers, status."""

from __future__ import annotations

import asyncio
import time

from pykubelet.api.pod import parse_pod
from pykubelet.pods import resize, resize_state
from pykubelet.pods.admission import Allocatable
from pykubelet.runtime.state import EXITED, RUNNING, ActualResources, ContainerState, PodRuntimeState, SandboxState

MI = 1 << 20


def pod(cpu: str = "100m", memory: str = "64Mi", policy: list | None = None, uid: str = "u1", name: str = "p"):
    container = {"name": "app", "image": "busybox:1.36",
                 "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu, "memory": memory}}}
    if policy is not None:
        container["resizePolicy"] = policy
    return parse_pod({"metadata": {"name": name, "uid": uid, "generation": 2},
                      "spec": {"containers": [container]}}, where="test")


def running(state: str = RUNNING) -> PodRuntimeState:
    return PodRuntimeState(uid="u1", sandboxes=[SandboxState("sb", 0, True, 1.0)],
                           containers=[ContainerState("c1", "app", state, 0, "h", 2.0, sandbox_id="sb")])


def test_the_allocation_replaces_cpu_and_memory_and_keeps_the_rest():
    allocated = resize.with_allocation(pod("300m", "128Mi"), resize.allocation_of(pod()))
    app = allocated.containers[0]
    assert app.cpu_request_millis == 100 and app.memory_request_bytes == 64 * MI
    unchanged = pod()
    assert resize.with_allocation(unchanged, resize.allocation_of(unchanged)).containers[0] is unchanged.containers[0]


def test_a_resize_that_fits_is_admitted():
    node = Allocatable(110, 2000, 4096 * MI)
    assert resize.admit_resize(pod("500m"), [pod("1", uid="u2", name="q")], node) is None


def test_a_resize_beyond_the_node_is_deferred_with_the_kubelets_message():
    pending = resize.admit_resize(pod("5"), [pod("1", uid="u2", name="q")], Allocatable(110, 4000, 4096 * MI))
    assert pending == resize.Pending("Deferred",
                                     "Node didn't have enough resource: cpu, requested: 5000, used: 1000, capacity: 4000")


def test_a_changed_cpu_is_updated_in_place_by_default():
    plan = resize.compute_resize(pod("300m"), running(), {"app": resize.container_amounts(pod().containers[0])})
    assert not plan.restart and [u.name for u in plan.updates["cpu"]] == ["app"] and not plan.updates["memory"]
    assert plan.updates["cpu"][0].desired.cpu_limit == 300 and plan.updates["cpu"][0].current.cpu_limit == 100


def test_restart_container_policy_for_memory_restarts_it():
    policy = [{"resourceName": "memory", "restartPolicy": "RestartContainer"}]
    plan = resize.compute_resize(pod(memory="128Mi", policy=policy), running(),
                                 {"app": resize.container_amounts(pod().containers[0])})
    assert plan.restart == {"c1": "Container app resize requires restart"} and plan.restart_names == ["app"]


def test_a_cpu_only_change_ignores_the_memory_restart_policy():
    policy = [{"resourceName": "memory", "restartPolicy": "RestartContainer"}]
    plan = resize.compute_resize(pod("300m", policy=policy), running(),
                                 {"app": resize.container_amounts(pod().containers[0])})
    assert not plan.restart and plan.updates["cpu"]


def test_decreases_are_ordered_before_increases():
    spec = parse_pod({"metadata": {"name": "p", "uid": "u1"}, "spec": {"containers": [
        {"name": n, "image": "i", "resources": {"limits": {"cpu": c, "memory": "64Mi"}}} for n, c in (("a", "500m"),
                                                                                                  ("b", "100m"))]}},
                     where="test")
    actuated = {"a": {"requests": {"cpu": "200m"}, "limits": {"cpu": "200m", "memory": "64Mi"}},
                "b": {"requests": {"cpu": "200m"}, "limits": {"cpu": "200m", "memory": "64Mi"}}}
    state = PodRuntimeState(uid="u1", sandboxes=[SandboxState("sb", 0, True, 1.0)], containers=[
        ContainerState(f"{n}1", n, RUNNING, 0, "h", 2.0, sandbox_id="sb") for n in ("a", "b")])
    plan = resize.compute_resize(resize.with_allocation(spec, {}), state, actuated)
    assert [u.name for u in plan.updates["cpu"]] == ["b", "a"]


def test_only_running_containers_with_a_record_are_resized():
    actuated = {"app": resize.container_amounts(pod().containers[0])}
    assert resize.compute_resize(pod("300m"), running(EXITED), actuated).is_noop()
    assert resize.compute_resize(pod("300m"), running(), {}).is_noop()  # started by an agent that kept none


def test_status_resources_read_back_from_the_runtime():
    amounts = resize.container_amounts(pod().containers[0])
    actual = ActualResources(cpu_shares=307, cpu_quota=30000, cpu_period=100000, memory_limit_bytes=128 * MI)
    shown = resize.status_resources(amounts, actual, running=True)
    assert shown == {"requests": {"cpu": "300m", "memory": "64Mi"}, "limits": {"cpu": "300m", "memory": "128Mi"}}
    assert resize.status_resources(amounts, actual, running=False) == amounts


def test_event_message_is_the_kubelets_summary():
    message = resize.event_message("Pod resize started", pod("300m"), 2)
    assert message.startswith('Pod resize started: {"containers":[{"name":"app","resources":{"limits"')
    assert message.endswith('"generation":2}')


def test_amounts_are_written_as_the_api_writes_them():
    assert [resize.millicores(m) for m in (300, 1000, 1500)] == ["300m", "1", "1500m"]
    assert [resize.binary_bytes(b) for b in (128 * MI, 1000, 1536, 3 << 30)] == ["128Mi", "1000", "1536", "3Gi"]


def test_pods_that_allocate_at_once_on_a_fresh_agent_all_keep_their_allocation(tmp_path, monkeypatch):
    """The pods an agent finds at start allocate concurrently; the checkpoint is read only once, so
    none of them loses the allocation it just made (a pod worker crashed with a KeyError)."""
    read, write, reads = resize_state._read, resize_state._write, []

    def slow_read(path: str):
        reads.append(path)
        time.sleep(0.2 if len(reads) == 2 else 0.01)  # the second pod's read ends last...
        return read(path)

    def slow_write(path: str, data: bytes):
        time.sleep(0.3)  # ...while the first pod's allocation is being written
        write(path, data)

    monkeypatch.setattr(resize_state, "_read", slow_read)
    monkeypatch.setattr(resize_state, "_write", slow_write)
    state = resize_state.ResizeState(str(tmp_path), Allocatable(110, 4000, 8192 * MI))
    pods = [pod(uid=f"u{i}", name=f"p{i}") for i in range(3)]

    async def allocate_all():
        return await asyncio.gather(*(state.allocate(p) for p in pods))

    results = asyncio.run(allocate_all())
    assert [allocated.uid for allocated, _events in results] == ["u0", "u1", "u2"]
    assert sorted(state.allocated) == ["u0", "u1", "u2"]
