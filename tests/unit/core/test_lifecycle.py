"""The pod path on the fake runtime: start, restart policies with the kubelet's back-off, init
containers and sidecars in order, a dead sandbox, and termination with grace and preStop."""

from __future__ import annotations

import asyncio

import pytest

from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.util import metrics
from tests.unit.core.harness import pod, until

pytestmark = pytest.mark.looptime


def relist_count() -> float:
    return metrics.REGISTRY.get_sample_value("kubelet_pleg_relist_duration_seconds_count") or 0.0


async def test_a_pod_starts_and_reports_running_with_its_ip(node):
    node.dispatcher.set_pods([pod()])
    await until(lambda: node.status().get("phase") == "Running", what="Running")
    assert node.status()["podIP"].startswith("10.88.0.")
    assert node.container()["ready"] is True and node.container()["restartCount"] == 0
    assert node.condition("Ready")["status"] == "True"
    assert [c.metadata.name for c in node.runtime.containers.values()] == ["app"]


async def test_a_sync_reads_the_cache_and_lists_the_runtime_only_through_the_pleg(node):
    node.dispatcher.set_pods([pod()])
    await until(lambda: node.status().get("phase") == "Running")
    # Ten syncs that change nothing (spec updates of the same pod) list nothing and inspect nothing.
    await asyncio.sleep(0.5)
    lists, statuses = node.runtime.count("ListContainers"), node.runtime.count("ContainerStatus")
    relists = relist_count()
    record = node.dispatcher.records.get("uid-web")
    syncs = record.syncs
    for _ in range(10):
        node.wakeups.wake("uid-web")
        await asyncio.sleep(0)
    await asyncio.sleep(0.001)
    assert record.syncs > syncs  # the wake-ups did sync
    assert relist_count() - relists <= 1  # at most the PLEG's own tick: the syncs asked for no relist
    assert node.runtime.count("ListContainers") - lists == relist_count() - relists  # each one a relist's
    assert node.runtime.count("ContainerStatus") == statuses


async def test_restart_policy_always_restarts_with_the_kubelets_back_off(node):
    node.runtime.behave("app", exit_code=1)
    node.dispatcher.set_pods([pod()])
    await until(lambda: len(node.runtime.started("app")) >= 4, timeout=200, what="three restarts")
    starts = node.runtime.started("app")
    gaps = [round(b - a) for a, b in zip(starts, starts[1:])]
    assert gaps == [0, 10, 20]  # the first restart at once, then 10 s doubling
    await until(lambda: node.container().get("state", {}).get("waiting", {}).get("reason") == "CrashLoopBackOff")
    assert node.container()["lastState"]["terminated"]["exitCode"] == 1
    assert node.container()["restartCount"] >= 3


@pytest.mark.parametrize("policy, code, phase, instances", [
    ("Never", 3, "Failed", 1),
    ("OnFailure", 0, "Succeeded", 1),
    ("Never", 0, "Succeeded", 1),
])
async def test_restart_policies_that_end_the_pod(node, policy, code, phase, instances):
    node.runtime.behave("app", exit_code=code)
    node.dispatcher.set_pods([pod(restartPolicy=policy)])
    await until(lambda: node.status().get("phase") == phase, what=phase)
    await asyncio.sleep(30)
    assert len(node.runtime.started("app")) == instances
    assert node.container()["state"]["terminated"]["exitCode"] == code
    # A pod done for good has its sandbox stopped and keeps its exited container.
    assert all(s.state == api.SANDBOX_NOTREADY for s in node.runtime.sandboxes.values())


async def test_on_failure_restarts_a_failed_container_until_it_succeeds(node):
    node.runtime.behave("app", exit_code=1)
    node.dispatcher.set_pods([pod(restartPolicy="OnFailure")])
    await until(lambda: len(node.runtime.started("app")) == 2, what="a restart")
    node.runtime.behave("app", exit_code=0)
    await until(lambda: node.status().get("phase") == "Succeeded", what="Succeeded")
    assert node.container()["restartCount"] == 2


async def test_init_containers_run_one_at_a_time_then_sidecars_then_the_app(node):
    for name in ("init1", "init2"):
        node.runtime.behave(name, exit_code=0)
    spec = pod(initContainers=[{"name": "init1", "image": "busybox:1.36"},
                               {"name": "side", "image": "busybox:1.36", "restartPolicy": "Always"},
                               {"name": "init2", "image": "busybox:1.36"}])
    node.dispatcher.set_pods([spec])
    await until(lambda: node.status().get("phase") == "Running", what="Running")
    order = [name for name, _ in node.runtime.starts]
    assert order == ["init1", "side", "init2", "app"]
    assert node.runtime.running("side") and node.runtime.running("app")
    assert node.condition("Initialized")["status"] == "True"


async def test_a_failed_init_container_with_restart_policy_never_fails_the_pod(node):
    node.runtime.behave("init", exit_code=2)
    node.dispatcher.set_pods([pod(restartPolicy="Never", initContainers=[{"name": "init", "image": "busybox:1.36"}])])
    await until(lambda: node.status().get("phase") == "Failed", what="Failed")
    assert node.runtime.started("app") == []
    assert node.condition("Initialized")["status"] == "False"


async def test_a_dead_sandbox_is_replaced_by_the_next_attempt_and_its_containers_restarted(node):
    node.dispatcher.set_pods([pod()])
    await until(lambda: node.status().get("phase") == "Running")
    first_ip = node.status()["podIP"]
    node.runtime.kill_sandbox("uid-web")
    await until(lambda: any(s.metadata.attempt == 1 and s.state == api.SANDBOX_READY
                            for s in node.runtime.sandboxes.values()), what="attempt 1")
    await until(lambda: node.runtime.running("app") and node.status().get("podIP") not in (None, first_ip))
    assert node.runtime.running("app")[0].metadata.attempt == 1  # the restart count goes on
    assert node.container()["restartCount"] == 1


async def test_removal_runs_pre_stop_then_stops_within_what_is_left_of_the_grace(node):
    node.runtime.behave("app", ignores_sigterm=True)
    spec = pod(terminationGracePeriodSeconds=20,
               containers=[{"name": "app", "image": "busybox:1.36",
                            "lifecycle": {"preStop": {"sleep": {"seconds": 5}}}}])
    node.dispatcher.set_pods([spec])
    await until(lambda: node.status().get("phase") == "Running")
    removed_at = asyncio.get_running_loop().time()
    node.dispatcher.set_pods([])
    await until(lambda: not node.runtime.containers and not node.runtime.sandboxes, what="everything removed")
    gone_at = asyncio.get_running_loop().time()
    (name, grace, stopped_at), = node.runtime.stops
    assert (name, grace) == ("app", 15)  # 20 s less the 5 s the preStop hook slept
    assert stopped_at - (removed_at + 1700000000.0) == pytest.approx(5, abs=0.1)
    assert gone_at - removed_at == pytest.approx(20, abs=0.2)  # SIGKILL at the end of the grace period
    # The worker still removes the pod's directories and cgroups (in threads) before it ends.
    await until(lambda: node.statuses.get("uid-web") is None and "uid-web" not in node.dispatcher.workers,
                timeout=5, what="the worker done and the status forgotten")


async def test_an_exec_pre_stop_hook_runs_in_the_container_before_it_is_stopped(node):
    spec = pod(containers=[{"name": "app", "image": "busybox:1.36",
                            "lifecycle": {"preStop": {"exec": {"command": ["drain", "now"]}}}}])
    node.dispatcher.set_pods([spec])
    await until(lambda: node.status().get("phase") == "Running")
    node.dispatcher.set_pods([])
    await until(lambda: not node.runtime.containers)
    assert node.runtime.execs == [("app", ["drain", "now"])]
    assert node.runtime.calls.index("ExecSync") < node.runtime.calls.index("StopContainer")


async def test_a_node_disk_that_refuses_the_pods_directories_is_retried_not_fatal(node, tmp_path):
    logs = tmp_path / "logs"
    logs.write_text("in the way: no directory can be made below it")  # what a full disk does to mkdir
    node.dispatcher.set_pods([pod()])
    await asyncio.sleep(5)
    assert not node.runtime.sandboxes and node.status().get("phase") != "Running"
    logs.unlink()  # space again
    await until(lambda: node.status().get("phase") == "Running", what="Running once the disk takes it")


async def test_a_pod_the_dispatcher_cannot_handle_leaves_the_other_pods_and_the_source_running(node, monkeypatch):
    # A bug meeting one odd pod (here: admission raising for it) is logged for that pod; the
    # source's call returns, so the other pods of the same set still start.
    from pykubelet.pods import dispatcher

    real_admit = dispatcher.admit

    def admit(p, *args, **kwargs):
        if p.name == "odd":
            raise TypeError("'NoneType' object is not iterable")
        return real_admit(p, *args, **kwargs)
    monkeypatch.setattr(dispatcher, "admit", admit)
    node.dispatcher.set_pods([pod("odd", uid="uid-odd"), pod()])
    await until(lambda: node.status().get("phase") == "Running", what="the other pod Running")
    assert "uid-odd" not in node.dispatcher.workers


async def test_an_ephemeral_container_added_to_a_running_pod_runs_and_is_reported_apart(node):
    spec = pod()
    node.dispatcher.set_pods([spec])
    await until(lambda: node.status().get("phase") == "Running")
    debugged = pod(ephemeralContainers=[{"name": "debugger", "image": "busybox:1.36", "stdin": True, "tty": True}])
    node.dispatcher.set_pods([debugged])
    await until(lambda: node.runtime.running("debugger"), what="the ephemeral container running")
    await until(lambda: "running" in (node.status().get("ephemeralContainerStatuses") or [{}])[0].get("state", {}))
    (status,) = node.status()["ephemeralContainerStatuses"]
    assert status["name"] == "debugger" and status["ready"] is False and "started" not in status
    assert [c["name"] for c in node.status()["containerStatuses"]] == ["app"]  # the app's status is its own
    assert node.status()["phase"] == "Running" and node.condition("Ready")["status"] == "True"
    assert len(node.runtime.started("app")) == 1  # adding it did not restart the app


def test_an_ephemeral_container_may_not_have_ports_probes_or_hooks():
    from pykubelet.api.errors import InvalidObject
    with pytest.raises(InvalidObject, match=r"spec.ephemeralContainers\[0\].ports: Forbidden"):
        pod(ephemeralContainers=[{"name": "d", "image": "busybox:1.36", "ports": [{"containerPort": 80}]}])
    with pytest.raises(InvalidObject, match="Duplicate value: 'app'"):
        pod(ephemeralContainers=[{"name": "app", "image": "busybox:1.36"}])


async def test_a_pod_past_its_active_deadline_is_failed_for_good_with_its_containers_killed(node):
    node.dispatcher.set_pods([pod()])
    await until(lambda: node.status().get("phase") == "Running")
    await asyncio.sleep(20)
    node.dispatcher.set_pods([pod(activeDeadlineSeconds=5)])  # lowered below what it has run already
    await until(lambda: node.status().get("phase") == "Failed", timeout=10, what="Failed")
    assert node.status()["reason"] == "DeadlineExceeded"
    assert node.status()["message"] == "Pod was active on the node longer than the specified deadline"
    await until(lambda: not node.runtime.running("app"), timeout=60, what="its container killed")
    await asyncio.sleep(120)
    assert len(node.runtime.started("app")) == 1 and node.status()["phase"] == "Failed"  # never again
    assert node.condition("Ready")["status"] == "False"


async def test_an_active_deadline_ends_the_pod_when_it_runs_out(node):
    node.dispatcher.set_pods([pod(activeDeadlineSeconds=30)])
    await until(lambda: node.status().get("phase") == "Running")
    started = asyncio.get_running_loop().time()
    failed = await until(lambda: node.status().get("phase") == "Failed", timeout=60, what="Failed")
    assert failed - started == pytest.approx(30, abs=2)


async def test_sidecars_are_stopped_after_the_app_containers_last_one_first(node):
    node.runtime.behave("app", ignores_sigterm=True)
    sidecar = {"image": "busybox:1.36", "restartPolicy": "Always"}
    spec = pod(terminationGracePeriodSeconds=20,
               initContainers=[{"name": "proxy", **sidecar}, {"name": "logger", **sidecar}],
               containers=[{"name": "app", "image": "busybox:1.36",
                            "lifecycle": {"preStop": {"exec": {"command": ["drain"]}}}}])
    node.dispatcher.set_pods([spec])
    await until(lambda: node.status().get("phase") == "Running" and node.runtime.running("logger"))
    node.dispatcher.set_pods([])
    await until(lambda: not node.runtime.containers, what="everything removed")
    order = [(name, grace) for name, grace, _ in node.runtime.stops]
    assert [name for name, _ in order] == ["app", "logger", "proxy"]
    (_, _, app_stopped), (_, logger_grace, logger_stopped), _ = node.runtime.stops
    assert logger_stopped >= app_stopped + 19  # the app used its whole grace period (it ignores SIGTERM)
    assert logger_grace == 2  # what is left of the grace period, at least the kubelet's minimum
