"""The pod's step history and the explanation built from it, on the fake runtime: each way a pod
fails to come up is named in the verdict's one line, with the facts the pod path recorded."""

from __future__ import annotations

import asyncio

import pytest

from pykubelet.diagnose import explain, verdict
from tests.unit.core.harness import Core, clock, pod, until

pytestmark = pytest.mark.looptime


def document(node: Core, name: str = "web", namespace: str = "default") -> dict:
    """What /debug/pods/<namespace>/<name> serves (server/local.py)."""
    found = next(((p, s) for p, s in node.statuses.pods() if (p.namespace, p.name) == (namespace, name)), None)
    obj = {**found[0].raw, "status": found[1]} if found else None
    return {"now": clock(), "pod": obj, "history": node.deps.history.snapshot(namespace, name)}


def explained(node: Core, name: str = "web") -> tuple[bool, str]:
    doc = document(node, name)
    return verdict.why(doc["pod"], doc["history"], doc["now"])


def steps(node: Core, kind: str | None = None) -> list[dict]:
    return [s for s in node.deps.history.snapshot("default", "web")["steps"] if kind is None or s["kind"] == kind]


async def test_a_healthy_pod_tells_each_step_and_is_running_and_ready(node):
    node.dispatcher.set_pods([pod()])
    await until(lambda: node.condition("Ready").get("status") == "True", what="Ready")
    assert [s["kind"] for s in steps(node)] == ["admission", "sandbox", "image", "container"]
    sandbox = steps(node, "sandbox")[0]
    assert sandbox["ok"] and sandbox["details"]["ip"] == node.status()["podIP"]
    assert sandbox["seconds"] is not None
    assert steps(node, "image")[0]["text"] == 'image "busybox:1.36" already present on the node'
    assert steps(node, "container")[0]["details"]["restart_count"] == 0
    ok, line = explained(node)
    assert ok and line == "Running and Ready: 1 of 1 container ready"
    text = explain.render(document(node), ok, line)
    assert text.splitlines()[-1] == f"→ {line}" and "admitted" in text and "sandbox" in text


async def test_a_missing_image_names_the_pull_error_and_when_the_next_pull_is(node):
    node.runtime.fail("PullImage", times=100, details='pull access denied, repository does not exist: "nosuch:1"')
    node.dispatcher.set_pods([pod(containers=[{"name": "app", "image": "nosuch:1"}])])
    await until(lambda: node.container().get("state", {}).get("waiting", {}).get("reason") == "ImagePullBackOff")
    await asyncio.sleep(25)  # two more failed pulls: one step, counted
    (pull,) = steps(node, "image")
    assert pull["ok"] is False and pull["count"] >= 2 and pull["details"]["reason"] == "ErrImagePull"
    ok, line = explained(node)
    assert not ok
    assert line.startswith('Not running: container "app" has no image: Failed to pull image "nosuch:1": pull '
                           "access denied")
    assert "; next pull in " in line


async def test_a_crash_loop_names_the_exit_code_the_restarts_and_the_back_off(node):
    node.runtime.behave("app", exit_code=1)
    node.dispatcher.set_pods([pod()])
    await until(lambda: len(node.runtime.started("app")) >= 4, timeout=200, what="three restarts")
    # The back-off after the fourth exit: until it is recorded, the last one (20 s) is over, and
    # the verdict rightly says the next start is now.
    await until(lambda: len(steps(node, "back-off")) >= 3, timeout=200, what="the third back-off")
    await until(lambda: node.container().get("state", {}).get("waiting", {}).get("reason") == "CrashLoopBackOff")
    exits = steps(node, "exit")
    assert len(exits) >= 3 and all(s["details"]["exit_code"] == 1 and s["ok"] is False for s in exits)
    backoffs = [s["details"]["delay"] for s in steps(node, "back-off")]
    assert backoffs[:2] == [10.0, 20.0]  # one step per back-off period, not per look
    ok, line = explained(node)
    assert not ok and line.startswith('Not running: container "app" keeps crashing: it exited with code 1 (Error), ')
    assert "restarts so far; back-off " in line and "next start in " in line


async def test_a_failing_readiness_probe_names_its_output(node):
    node.runtime.exec_results["check"] = (1, b"database not reachable")
    probe = {"exec": {"command": ["check"]}, "periodSeconds": 1, "failureThreshold": 2}
    node.dispatcher.set_pods([pod(containers=[{"name": "app", "image": "busybox:1.36", "readinessProbe": probe}])])
    await until(lambda: node.status().get("phase") == "Running")
    await asyncio.sleep(10)
    ok, line = explained(node)
    assert not ok
    assert line.startswith('Running but not Ready: container "app" fails its readiness probe: database not '
                           "reachable (")
    (record,) = node.deps.history.snapshot("default", "web")["probes"]
    assert record["streak"] >= 9 and not record["ok"]
    # A probe that keeps failing is one step, not one per attempt.
    assert [s["text"] for s in steps(node, "probe")] == ["readiness probe failed: database not reachable"]
    node.runtime.exec_results["check"] = (0, b"")
    await until(lambda: node.condition("Ready").get("status") == "True", what="Ready once the probe passes")
    assert steps(node, "probe")[-1]["text"] == "readiness probe succeeded"
    assert explained(node)[0]


async def test_a_volume_that_cannot_be_set_up_is_why_nothing_starts(node):
    volume = {"name": "settings", "configMap": {"name": "app-config"}}
    node.dispatcher.set_pods([pod(volumes=[volume])])
    await until(lambda: steps(node, "volumes"), what="a volume step")
    await asyncio.sleep(10)
    ok, line = explained(node)
    assert not node.runtime.sandboxes
    assert line.startswith('Not running: volume "settings" (configMap) cannot be set up: couldn\'t get configmap '
                           "default/app-config")
    assert "the containers start once every volume is set up; next try in" in line


async def test_a_missing_env_object_names_the_field_that_uses_it(node):
    spec = {"name": "app", "image": "busybox:1.36",
            "env": [{"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "app-config", "key": "mode"}}}]}
    node.dispatcher.set_pods([pod(containers=[spec])])
    await until(lambda: node.container().get("state", {}).get("waiting", {}).get("reason")
                == "CreateContainerConfigError")
    ok, line = explained(node)
    assert line.startswith('Not running: container "app" cannot be configured: ')
    assert verdict.referenced_by({"containers": [spec]}, "configmap", "app-config") == [
        'container "app" env MODE (valueFrom.configMapKeyRef)']


async def test_a_pod_rejected_at_admission_says_why(node):
    big = pod(containers=[{"name": "app", "image": "busybox:1.36", "resources": {"requests": {"cpu": "64"}}}])
    node.dispatcher.set_pods([big])
    await until(lambda: node.status().get("phase") == "Failed")
    ok, line = explained(node)
    assert line.startswith("Failed: Pod was rejected: Node didn't have enough resource: cpu")
    assert steps(node, "admission")[0]["ok"] is False


async def test_termination_records_the_pre_stop_and_the_sigkill(node):
    node.runtime.behave("app", ignores_sigterm=True)
    spec = pod(terminationGracePeriodSeconds=10,
               containers=[{"name": "app", "image": "busybox:1.36", "lifecycle": {"preStop": {"sleep": {"seconds": 3}}}}])
    node.dispatcher.set_pods([spec])
    await until(lambda: node.status().get("phase") == "Running")
    node.dispatcher.set_pods([])
    # The pod's worker ends after the sandbox goes: its files are removed in a thread meanwhile.
    await until(lambda: not node.runtime.sandboxes and not node.dispatcher.workers, what="everything removed")
    (stop,) = steps(node, "stop")
    assert stop["text"] == "stopped (Stopping pod): preStop ran in 3.0s, SIGKILL after the 10s grace period"
    assert stop["details"]["sigkill"] is True
    assert steps(node)[-1]["kind"] == "termination"
    ok, line = explained(node)
    assert line.startswith("Gone: Pod removed at ") and line.endswith("; this node no longer runs it")


async def test_a_container_that_stops_on_sigterm_is_not_said_to_be_killed(node):
    node.dispatcher.set_pods([pod(terminationGracePeriodSeconds=10)])
    await until(lambda: node.status().get("phase") == "Running")
    node.dispatcher.set_pods([])
    # The pod's worker ends after the sandbox goes: its files are removed in a thread meanwhile.
    await until(lambda: not node.runtime.sandboxes and not node.dispatcher.workers, what="everything removed")
    (stop,) = steps(node, "stop")
    assert stop["text"] == "stopped (Stopping pod): exited on SIGTERM within the 10s grace"


async def test_each_failure_an_event_tells_is_a_failed_step_of_the_history_with_the_same_error(node):
    node.runtime.fail("RunPodSandbox", details="no network")
    node.runtime.fail("CreateContainer", details="bad mount")
    node.runtime.fail("StartContainer", details="exec: no such file")
    warnings = []
    record = node.deps.recorder.record

    def keep(ref, kind, reason, message):
        if kind == "Warning":
            warnings.append((reason, message))
        record(ref, kind, reason, message)

    node.deps.recorder.record = keep
    node.dispatcher.set_pods([pod()])
    await until(lambda: node.condition("Ready").get("status") == "True", timeout=200,
                what="Ready after the retries")
    assert warnings == [("FailedCreatePodSandBox", "Failed to create pod sandbox: no network"),
                        ("Failed", "Error: bad mount"), ("Failed", "Error: exec: no such file")]
    failed = [(s["kind"], s["text"]) for s in steps(node) if s["ok"] is False]
    assert failed == [("sandbox", "sandbox (attempt 0) cannot be created: no network"),
                      ("container", "CreateContainerError: bad mount"),
                      ("container", "RunContainerError: exec: no such file")]
