"""/healthz: healthy until a queued sync waits longer than 2 x syncPeriod; the node must be eligible."""

from __future__ import annotations

from pykubelet.proxy.health import HealthState


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_sync_waiting_too_long_is_unhealthy_and_a_sync_heals():
    clock = Clock()
    node = {"metadata": {"name": "n1"}, "spec": {}}
    state = HealthState(timeout=60, node=lambda: node, clock=clock)
    state.updated()
    assert state.body(with_node=True)[0] == 200
    state.queued()
    clock.now += 59
    assert state.body(with_node=True)[0] == 200
    clock.now += 2
    status, doc = state.body(with_node=True)
    assert status == 503 and doc["healthy"] is False and doc["status"]["IPv4"]["healthy"] is False
    state.updated()
    assert state.body(with_node=True)[0] == 200


def test_a_node_on_its_way_out_fails_healthz_but_not_livez():
    gone = {"metadata": {"name": "n1", "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    tainted = {"metadata": {"name": "n1"}, "spec": {"taints": [{"key": "ToBeDeletedByClusterAutoscaler"}]}}
    for node in (None, gone, tainted):
        state = HealthState(timeout=60, node=lambda node=node: node)
        state.updated()
        status, doc = state.body(with_node=True)
        assert status == 503 and doc["nodeEligible"] is False and doc["healthy"] is True
        assert state.body(with_node=False)[0] == 200
