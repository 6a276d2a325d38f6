"""The core around the pods on the fake runtime: graceful deletion through the apiserver,
admission, image and runtime failures, probes, housekeeping after a restart, mirror pods, and a
runtime that stops answering."""

from __future__ import annotations

import asyncio
import contextlib
import copy

import pytest

from pykubelet.api.pod import parse_pod
from pykubelet.cri import errors
from pykubelet.pods.housekeeping import housekeeping
from pykubelet.pods.mirror import MirrorPods
from tests.fakes.kube import FakeKube
from tests.fakes.runtime import FakeRuntime
from tests.unit.core.harness import Core, clock, pod, until

pytestmark = pytest.mark.looptime

PATH = "/api/v1/namespaces/default/pods/web"


def waiting_reason(node, name="app"):
    return node.container(name).get("state", {}).get("waiting", {}).get("reason")


def deleted(spec, grace):
    raw = copy.deepcopy(spec.raw)
    raw["metadata"].update(deletionTimestamp="2023-11-14T22:15:00Z", deletionGracePeriodSeconds=grace)
    return parse_pod(raw, where="test")


@contextlib.asynccontextmanager
async def running_api_pod(tmp_path, spec, kube):
    """A node running `spec` from the apiserver, its app ignoring SIGTERM; stopped afterwards."""
    runtime = FakeRuntime(clock)
    runtime.behave("app", ignores_sigterm=True)
    kube.objects[PATH] = copy.deepcopy(spec.raw)
    node = Core(runtime, tmp_path, kube).start()
    try:
        node.dispatcher.set_pods([spec], "api")
        await until(lambda: node.status().get("phase") == "Running")
        yield runtime, node
    finally:
        await node.stop()


async def test_graceful_deletion_stops_within_its_grace_then_deletes_with_the_uid_precondition(tmp_path):
    kube, spec = FakeKube(), pod()
    async with running_api_pod(tmp_path, spec, kube) as (runtime, node):
        began = asyncio.get_running_loop().time()
        node.dispatcher.set_pods([deleted(spec, 7)], "api")
        await until(lambda: PATH not in kube.objects, what="the final DELETE")
        assert asyncio.get_running_loop().time() - began == pytest.approx(7, abs=0.5)
        assert runtime.stops == [("app", 7, pytest.approx(clock(), abs=10))]
        verb, path, body = kube.writes[-1]
        assert (verb, path) == ("delete", PATH)
        assert body["gracePeriodSeconds"] == 0 and body["preconditions"] == {"uid": "uid-web"}
        assert not runtime.containers and not runtime.sandboxes


async def test_a_force_deleted_pod_is_stopped_within_its_deletion_grace_not_its_specs(tmp_path):
    kube, spec = FakeKube(), pod(terminationGracePeriodSeconds=500)
    async with running_api_pod(tmp_path, spec, kube) as (runtime, node):
        began = asyncio.get_running_loop().time()
        del kube.objects[PATH]  # gone at once: the source hands it over deleted, then without it
        node.dispatcher.set_pods([deleted(spec, 0)], "api")
        node.dispatcher.set_pods([], "api")
        await until(lambda: not runtime.containers and not runtime.sandboxes and not node.dispatcher.workers,
                    timeout=60, what="everything removed, the pod's worker done")
        assert asyncio.get_running_loop().time() - began < 5
        assert [(name, grace) for name, grace, _ in runtime.stops] == [("app", 0)]
        assert node.statuses.get("uid-web") is None  # nothing left to report for it


class FinalizerKube(FakeKube):
    """An apiserver whose pods carry a finalizer: the final DELETE leaves them there."""

    async def delete(self, path, body=None):
        self.writes.append(("delete", path, copy.deepcopy(body)))


async def test_a_deleted_pod_reports_how_its_containers_ended_before_the_final_delete_and_only_once(tmp_path):
    runtime, kube = FakeRuntime(clock), FinalizerKube()
    spec = pod(containers=[{"name": "app", "image": "busybox:1.36"}])
    kube.objects[PATH] = copy.deepcopy(spec.raw)
    node = Core(runtime, tmp_path, kube).start()
    try:
        node.dispatcher.set_pods([spec], "api")
        await until(lambda: node.status().get("phase") == "Running")
        node.dispatcher.set_pods([deleted(spec, 5)], "api")
        await until(lambda: any(verb == "delete" for verb, _, _ in kube.writes), what="the final DELETE")
        last_status = [i for i, (verb, _, _) in enumerate(kube.writes) if verb == "patch"][-1]
        first_delete = next(i for i, (verb, _, _) in enumerate(kube.writes) if verb == "delete")
        assert last_status < first_delete  # what the pod ended as is written before it may go
        status = kube.objects[PATH]["status"]
        terminated = status["containerStatuses"][0]["state"]["terminated"]
        assert terminated["finishedAt"] and status["phase"] in ("Succeeded", "Failed")  # terminal, as the kubelet's
        assert status["phase"] == ("Succeeded" if terminated["exitCode"] == 0 else "Failed")
        # The finalizer keeps the pod: its updates neither restart the termination nor delete it again.
        writes = len(kube.writes)
        for _ in range(3):
            node.dispatcher.set_pods([deleted(spec, 0)], "api")
            await asyncio.sleep(15)
        assert kube.writes[writes:] == [] and runtime.count("RunPodSandbox") == 1
        assert "uid-web" not in node.dispatcher.workers
    finally:
        await node.stop()


async def test_while_a_deleted_pod_stops_readiness_is_still_probed_and_reported_but_liveness_is_not(tmp_path):
    runtime, kube = FakeRuntime(clock), FakeKube()
    runtime.behave("app", ignores_sigterm=True)
    runtime.exec_results.update(ready=(0, b""), alive=(0, b""))
    probes = {"readinessProbe": {"exec": {"command": ["ready"]}, "periodSeconds": 1, "failureThreshold": 1},
              "livenessProbe": {"exec": {"command": ["alive"]}, "periodSeconds": 1, "failureThreshold": 1}}
    spec = pod(containers=[{"name": "app", "image": "busybox:1.36", **probes}])
    kube.objects[PATH] = copy.deepcopy(spec.raw)
    node = Core(runtime, tmp_path, kube).start()

    def ready_in_api():
        conditions = kube.objects.get(PATH, {}).get("status", {}).get("conditions", [])
        return next((c["status"] for c in conditions if c["type"] == "Ready"), None)
    try:
        node.dispatcher.set_pods([spec], "api")
        await until(lambda: ready_in_api() == "True", what="Ready")
        node.dispatcher.set_pods([deleted(spec, 30)], "api")
        await asyncio.sleep(2)
        probed_before = len(runtime.execs)
        runtime.exec_results.update(ready=(1, b"draining"), alive=(1, b"dying"))  # what its SIGTERM handler does
        await until(lambda: ready_in_api() == "False", timeout=10, what="not Ready while it stops")
        assert runtime.running("app")  # well before the end of its grace period
        assert [cmd for _, cmd in runtime.execs[probed_before:]] and \
            all(cmd == ["ready"] for _, cmd in runtime.execs[probed_before:])  # no liveness probe any more
        await until(lambda: PATH not in kube.objects, timeout=60, what="the final DELETE")
    finally:
        await node.stop()


async def test_a_pod_that_does_not_fit_is_rejected_as_failed_and_never_run(tmp_path):
    runtime = FakeRuntime(clock)
    node = Core(runtime, tmp_path).start()
    try:
        greedy = pod(containers=[{"name": "app", "image": "busybox:1.36",
                                  "resources": {"requests": {"cpu": "64"}}}])
        node.dispatcher.set_pods([greedy])
        await asyncio.sleep(2)
        assert node.status()["phase"] == "Failed" and node.status()["reason"] == "OutOfcpu"
        assert node.status()["message"].startswith("Pod was rejected: Node didn't have enough resource: cpu")
        assert runtime.count("RunPodSandbox") == 0
    finally:
        await node.stop()


async def test_a_failed_pull_waits_with_err_image_pull_then_image_pull_back_off(tmp_path):
    runtime = FakeRuntime(clock)
    runtime.fail("PullImage", times=10, details="pull access denied")
    node = Core(runtime, tmp_path).start()
    try:
        node.dispatcher.set_pods([pod(containers=[{"name": "app", "image": "nowhere/app:1"}])])
        await until(lambda: waiting_reason(node) == "ErrImagePull", what="ErrImagePull")
        assert "pull access denied" in node.container()["state"]["waiting"]["message"]
        await until(lambda: waiting_reason(node) == "ImagePullBackOff", what="ImagePullBackOff")
        runtime._failures.clear()
        await until(lambda: node.status().get("phase") == "Running", timeout=400, what="the pull succeeds")
    finally:
        await node.stop()


async def test_runtime_errors_show_as_waiting_reasons_and_are_retried(tmp_path):
    runtime = FakeRuntime(clock)
    runtime.fail("RunPodSandbox", details="no network")
    runtime.fail("CreateContainer", times=3, details="bad mount")
    node = Core(runtime, tmp_path).start()
    try:
        node.dispatcher.set_pods([pod()])
        await until(lambda: "Failed to create pod sandbox: no network" in
                    node.container().get("state", {}).get("waiting", {}).get("message", ""), what="sandbox error")
        await until(lambda: waiting_reason(node) == "CreateContainerError", what="CreateContainerError")
        await until(lambda: node.status().get("phase") == "Running", what="the retry")
        # One sandbox after the failed one, kept while its container could not be created.
        assert runtime.count("RunPodSandbox") == 2 and runtime.count("CreateContainer") == 4
        assert len(runtime.sandboxes) == 1
    finally:
        await node.stop()


async def test_a_failing_liveness_probe_restarts_the_container(tmp_path):
    runtime = FakeRuntime(clock)
    node = Core(runtime, tmp_path).start()
    try:
        probe = {"exec": {"command": ["alive"]}, "periodSeconds": 2, "failureThreshold": 2}
        node.dispatcher.set_pods([pod(containers=[{"name": "app", "image": "busybox:1.36", "livenessProbe": probe}])])
        await until(lambda: node.status().get("phase") == "Running")
        await asyncio.sleep(30)
        assert len(runtime.started("app")) == 1
        runtime.exec_results["alive"] = (1, b"dead")
        await until(lambda: len(runtime.started("app")) == 2, what="the restart")
        assert runtime.stops[0][0] == "app"
        await until(lambda: node.container().get("restartCount") == 1)
    finally:
        await node.stop()


async def test_a_probe_with_its_own_termination_grace_period_kills_within_it_not_the_pods(tmp_path):
    runtime = FakeRuntime(clock)
    runtime.behave("app", ignores_sigterm=True)
    runtime.exec_results["alive"] = (1, b"dead")
    node = Core(runtime, tmp_path).start()
    try:
        probe = {"exec": {"command": ["alive"]}, "initialDelaySeconds": 10, "failureThreshold": 1,
                 "terminationGracePeriodSeconds": 5}
        node.dispatcher.set_pods([pod(terminationGracePeriodSeconds=500,
                                      containers=[{"name": "app", "image": "busybox:1.36", "livenessProbe": probe}])])
        await until(lambda: len(runtime.started("app")) == 2, timeout=60, what="the restart within the probe's grace")
        assert [(name, grace) for name, grace, _ in runtime.stops] == [("app", 5)]
    finally:
        await node.stop()


async def test_housekeeping_after_a_restart_terminates_only_what_no_source_wants(tmp_path):
    runtime = FakeRuntime(clock)
    first = Core(runtime, tmp_path).start()
    first.dispatcher.set_pods([pod(), pod("db", "uid-db")])
    await until(lambda: first.status("uid-db").get("phase") == "Running" and first.status().get("phase") == "Running")
    await first.stop()

    second = Core(runtime, tmp_path).start()
    source_ready = asyncio.Event()
    task = asyncio.create_task(housekeeping(second.dispatcher, second.cache, second.pleg.relisted, [source_ready],
                                            str(tmp_path / "root")))
    try:
        await asyncio.sleep(10)
        assert len(runtime.containers) == 2  # nothing is an orphan before the source has spoken
        second.dispatcher.set_pods([pod()])  # the db pod was removed while the agent was down
        source_ready.set()
        await until(lambda: {c.labels["io.kubernetes.pod.name"] for c in runtime.containers.values()} == {"web"},
                    what="the orphan terminated")
        assert len(runtime.started("app")) == 2  # web adopted, not restarted
    finally:
        task.cancel()
        await second.stop()


async def test_housekeeping_removes_the_log_directory_a_cut_short_cleanup_left(tmp_path):
    """An agent killed after a deleted pod's final status, before its files went: the next agent
    sees nothing of the pod anywhere but its log directory, and removes that (only that)."""
    runtime = FakeRuntime(clock)
    node = Core(runtime, tmp_path).start()
    node.dispatcher.set_pods([pod()])
    await until(lambda: node.status().get("phase") == "Running")
    logs = tmp_path / "logs"
    kept = {p.name for p in logs.iterdir()}  # the running pod's
    (logs / "default_gone_uid-gone" / "app").mkdir(parents=True)
    (logs / "default_gone_uid-gone" / "app" / "0.log").write_text("the last words\n")
    (logs / "not-a-pod").mkdir()
    source_ready = asyncio.Event()
    source_ready.set()
    task = asyncio.create_task(housekeeping(node.dispatcher, node.cache, node.pleg.relisted, [source_ready],
                                            str(tmp_path / "root"), pod_logs_dir=str(logs)))
    try:
        await until(lambda: not (logs / "default_gone_uid-gone").exists(), what="the orphan's log directory gone")
        assert {p.name for p in logs.iterdir()} == kept | {"not-a-pod"}
    finally:
        task.cancel()
        await node.stop()


async def test_a_static_pod_gets_a_mirror_pod_that_comes_back_and_goes_with_it(tmp_path):
    runtime, kube = FakeRuntime(clock), FakeKube()
    wake = []
    static_raw = copy.deepcopy(pod(uid="uid-static").raw)
    static_raw["metadata"]["annotations"] = {"kubernetes.io/config.source": "file"}
    static = parse_pod(static_raw, "test")
    core = Core(runtime, tmp_path, kube)
    mirrors = MirrorPods(kube, "node1", lambda: "node-uid", core.wakeups.wake)
    node = Core(runtime, tmp_path, kube, mirrors).start()
    del core, wake

    def listed():
        return [parse_pod(copy.deepcopy(o), "mirror") for o in kube.objects.values()]

    try:
        mirrors.update([])
        node.dispatcher.set_pods([static])
        await until(lambda: PATH in kube.objects, what="the mirror pod")
        mirror = kube.objects[PATH]
        assert mirror["metadata"]["annotations"]["kubernetes.io/config.mirror"] == "uid-static"
        assert mirror["metadata"]["ownerReferences"][0]["uid"] == "node-uid"
        mirrors.update(listed())
        await until(lambda: kube.objects[PATH].get("status", {}).get("phase") == "Running", what="its status")
        del kube.objects[PATH]  # a user deletes the mirror
        mirrors.update([])
        await until(lambda: PATH in kube.objects, what="the mirror recreated")
        mirrors.update(listed())
        node.dispatcher.set_pods([])
        await until(lambda: PATH not in kube.objects, what="the mirror removed with its pod")
    finally:
        await node.stop()


async def test_a_runtime_that_stops_answering_costs_syncs_not_pods(tmp_path):
    runtime = FakeRuntime(clock)
    node = Core(runtime, tmp_path).start()
    try:
        node.dispatcher.set_pods([pod()])
        await until(lambda: node.status().get("phase") == "Running")
        runtime.fail("ListPodSandbox", errors.Unavailable, times=20, details="connection refused")
        runtime.exit("app", 1)
        await asyncio.sleep(5)
        assert node.pleg.healthy()  # three minutes are allowed
        assert len(runtime.started("app")) == 1
        await until(lambda: len(runtime.started("app")) == 2, timeout=120, what="the restart once it answers")
        assert "uid-web" in node.dispatcher.workers
    finally:
        await node.stop()


async def test_a_failing_post_start_hook_kills_the_container_which_is_then_restarted(tmp_path):
    runtime = FakeRuntime(clock)
    runtime.exec_results["setup"] = (1, b"no config")
    node = Core(runtime, tmp_path).start()
    try:
        spec = pod(containers=[{"name": "app", "image": "busybox:1.36",
                                "lifecycle": {"postStart": {"exec": {"command": ["setup"]}}}}])
        node.dispatcher.set_pods([spec])
        await until(lambda: runtime.stops, what="the container killed")
        assert runtime.calls.index("ExecSync") < runtime.calls.index("StopContainer")
        runtime.exec_results["setup"] = (0, b"")
        await until(lambda: node.container().get("ready"), what="a restart whose hook works")
        assert node.container()["restartCount"] == len(runtime.started("app")) - 1 >= 1
    finally:
        await node.stop()


async def test_a_container_that_cannot_start_waits_with_run_container_error(tmp_path):
    runtime = FakeRuntime(clock)
    runtime.fail("StartContainer", times=2, details="exec: no such file")
    node = Core(runtime, tmp_path).start()
    seen = []
    set_status = node.statuses.set

    def record(pod_, status):
        seen.append(status.to_dict()["containerStatuses"][0]["state"].get("waiting", {}))
        set_status(pod_, status)

    node.statuses.set = record
    try:
        node.dispatcher.set_pods([pod()])
        await until(lambda: node.status().get("phase") == "Running", timeout=200, what="a start that works")
        assert {"reason": "RunContainerError", "message": "exec: no such file"} in seen
    finally:
        await node.stop()
