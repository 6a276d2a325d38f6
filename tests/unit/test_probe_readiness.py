"""The probes-to-status seam (probes/readiness.py): how probe results become the `started` and
`ready` of a pod's container statuses, rule by rule as the kubelet's prober manager sets them,
and the agent-restart rule that keeps a Ready pod Ready while its probes have not run yet."""

from __future__ import annotations

from typing import Any

from pykubelet.api.pod import parse_pod
from pykubelet.api.pod_status import ContainerStatus, PodStatus, Running, Terminated, Waiting
from pykubelet.api.times import rfc3339
from pykubelet.probes.readiness import ProbeResults, update_pod_status

AGENT_START = 1_700_000_000.0
BEFORE_AGENT = AGENT_START - 11  # ran across the agent's restart
AFTER_AGENT = AGENT_START + 5
PROBE = {"exec": {"command": ["check"]}}


def pod(containers: list[dict[str, Any]], inits: list[dict[str, Any]] = (), status: dict[str, Any] | None = None,
        ephemeral: bool = False):
    raw: dict[str, Any] = {"metadata": {"name": "web", "uid": "u1"}, "spec": {
        "containers": [{"image": "busybox", **c} for c in containers],
        "initContainers": [{"image": "busybox", **c} for c in inits]}}
    if ephemeral:
        raw["spec"]["ephemeralContainers"] = [{"name": "debug", "image": "busybox"}]
    if status is not None:
        raw["status"] = status
    return parse_pod(raw, where="test")


def running(name: str, started_at: float = AFTER_AGENT, cid: str = "") -> ContainerStatus:
    return ContainerStatus(name, "busybox", Running(rfc3339(started_at) or ""),
                           container_id=f"containerd://{cid or name}")


def terminated(name: str, exit_code: int) -> ContainerStatus:
    return ContainerStatus(name, "busybox", Terminated(exit_code, "Completed", "", "", f"containerd://{name}"),
                           container_id=f"containerd://{name}")


def apply(p, containers=(), inits=(), ephemerals=(), results: dict[str, ProbeResults] | None = None) -> PodStatus:
    status = PodStatus("Running", list(containers), list(inits), list(ephemerals))
    update_pod_status(p, status, results or {}, AGENT_START)
    return status


def started_ready(status: ContainerStatus) -> tuple[bool | None, bool]:
    return status.started, status.ready


def test_a_running_container_without_probes_is_started_and_ready():
    s = apply(pod([{"name": "app"}]), [running("app")])
    assert started_ready(s.container_statuses[0]) == (True, True)


def test_a_container_that_is_not_running_is_neither_started_nor_ready():
    s = apply(pod([{"name": "a"}, {"name": "b"}]),
              [ContainerStatus("a", "busybox", Waiting("ContainerCreating")), terminated("b", 0)])
    assert [started_ready(c) for c in s.container_statuses] == [(False, False), (False, False)]


def test_the_startup_probe_gates_started_and_ready():
    p = pod([{"name": "app", "startupProbe": PROBE}])
    assert started_ready(apply(p, [running("app")]).container_statuses[0]) == (False, False)  # no result yet
    no = {"app": ProbeResults(started=False)}
    assert started_ready(apply(p, [running("app")], results=no).container_statuses[0]) == (False, False)
    yes = {"app": ProbeResults(started=True)}
    assert started_ready(apply(p, [running("app")], results=yes).container_statuses[0]) == (True, True)


def test_ready_follows_the_readiness_result_and_is_false_without_one():
    p = pod([{"name": "app", "readinessProbe": PROBE}])
    assert started_ready(apply(p, [running("app")]).container_statuses[0]) == (True, False)
    for result, ready in ((ProbeResults(ready=False), False), (ProbeResults(ready=True), True),
                          (ProbeResults(ready=None), False)):
        assert apply(p, [running("app")], results={"app": result}).container_statuses[0].ready is ready


def test_results_are_per_container_instance():
    p = pod([{"name": "app", "readinessProbe": PROBE}])
    old = {"old-instance": ProbeResults(ready=True)}
    assert apply(p, [running("app", cid="new-instance")], results=old).container_statuses[0].ready is False


def test_an_init_container_is_ready_once_it_exited_zero_and_a_sidecar_like_an_app_container():
    p = pod([{"name": "app"}], inits=[{"name": "ok"}, {"name": "bad"}, {"name": "busy"},
                                       {"name": "side", "restartPolicy": "Always", "readinessProbe": PROBE}])
    s = apply(p, [running("app")], [terminated("ok", 0), terminated("bad", 1), running("busy"), running("side")],
              results={"side": ProbeResults(ready=True)})
    assert [started_ready(c) for c in s.init_container_statuses] == [(False, True), (False, False), (True, False),
                                                                     (True, True)]
    s = apply(p, [running("app")], [running("side")], results={"side": ProbeResults(ready=False)})
    assert started_ready(s.init_container_statuses[0]) == (True, False)


def test_an_ephemeral_container_is_never_ready_and_reports_no_started():
    s = apply(pod([{"name": "app"}], ephemeral=True), [running("app")], ephemerals=[running("debug")])
    assert started_ready(s.ephemeral_container_statuses[0]) == (None, False)
    assert "started" not in s.ephemeral_container_statuses[0].to_dict()


def ready_condition(value: str) -> dict[str, Any]:
    return {"conditions": [{"type": "Initialized", "status": "True"}, {"type": "Ready", "status": value}]}


def test_after_an_agent_restart_a_container_of_a_ready_pod_stays_ready_until_its_probe_concludes():
    p = pod([{"name": "app", "readinessProbe": PROBE}], status=ready_condition("True"))
    assert apply(p, [running("app", BEFORE_AGENT)]).container_statuses[0].ready is True  # no probe ran yet
    undecided = {"app": ProbeResults(ready=None)}  # probing, below its failure threshold
    assert apply(p, [running("app", BEFORE_AGENT)], results=undecided).container_statuses[0].ready is True
    failed = {"app": ProbeResults(ready=False)}
    assert apply(p, [running("app", BEFORE_AGENT)], results=failed).container_statuses[0].ready is False


def test_the_restart_rule_is_only_for_containers_older_than_the_agent_of_a_pod_the_apiserver_had_ready():
    ready = pod([{"name": "app", "readinessProbe": PROBE}], status=ready_condition("True"))
    assert apply(ready, [running("app", AFTER_AGENT)]).container_statuses[0].ready is False
    assert apply(ready, [running("app", AGENT_START - 9)]).container_statuses[0].ready is False  # within the grace
    assert apply(ready, [running("app", AFTER_AGENT)],
                 results={"app": ProbeResults(ready=True)}).container_statuses[0].ready is True
    not_ready = pod([{"name": "app", "readinessProbe": PROBE}], status=ready_condition("False"))
    assert apply(not_ready, [running("app", BEFORE_AGENT)]).container_statuses[0].ready is False
    no_status = pod([{"name": "app", "readinessProbe": PROBE}])  # e.g. a static pod's manifest
    assert apply(no_status, [running("app", BEFORE_AGENT)]).container_statuses[0].ready is False
    unprobed = pod([{"name": "app"}], status=ready_condition("False"))
    assert apply(unprobed, [running("app", BEFORE_AGENT)]).container_statuses[0].ready is True


def reported(started: bool, cid: str = "app", key: str = "containerStatuses") -> dict[str, Any]:
    return {**ready_condition("True"), key: [{"name": "app" if key == "containerStatuses" else "side",
                                              "started": started, "containerID": f"containerd://{cid}"}]}


def test_after_an_agent_restart_a_container_reported_started_stays_started():
    spec = [{"name": "app", "startupProbe": PROBE}]
    assert started_ready(apply(pod(spec, status=reported(True)),
                               [running("app", BEFORE_AGENT)]).container_statuses[0]) == (True, True)
    for status, started_at in ((reported(False), BEFORE_AGENT), (reported(True), AFTER_AGENT),
                               (reported(True, cid="previous-instance"), BEFORE_AGENT)):
        got = apply(pod(spec, status=status), [running("app", started_at)]).container_statuses[0]
        assert started_ready(got) == (False, False), status
    failed = {"app": ProbeResults(started=False)}  # a startup result wins over what was reported
    assert apply(pod(spec, status=reported(True)), [running("app", BEFORE_AGENT)],
                 results=failed).container_statuses[0].started is False
