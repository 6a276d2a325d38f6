"""A running pod's worker syncs for what changes how the pod runs, not for the apiserver's echo of
the node's own status write (the kubelet's status-only reconcile): two of every API pod's three
syncs at start were such echoes. A condition someone else owns (a readiness gate's) does wake it:
its Ready condition follows that gate."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from pykubelet.api.pod import parse_pod
from tests.unit.core.harness import pod, until

pytestmark = pytest.mark.looptime


def updated(raw: dict[str, Any], **changes: Any) -> Any:
    """The pod as the apiserver sends it back: the same object with `changes` applied."""
    new = copy.deepcopy(raw)
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        target = new
        for key in parents:
            target = target.setdefault(key, {})
        target[leaf] = value
    return parse_pod(new, where="test")


def syncs(node) -> int:
    return node.dispatcher.records.get("uid-web").syncs


async def test_the_echo_of_the_nodes_own_status_costs_no_sync_but_a_label_change_does(node, monkeypatch):
    first = pod()
    node.dispatcher.set_pods([first])
    await until(lambda: node.status().get("phase") == "Running", what="Running")
    woken: list[str] = []  # the dispatcher wakes a worker at once, inside set_pods: nothing to wait for
    wake = node.wakeups.wake
    monkeypatch.setattr(node.wakeups, "wake", lambda uid: (woken.append(uid), wake(uid)))

    echo = updated(first.raw, status=copy.deepcopy(node.status()), metadata__resourceVersion="7")
    node.dispatcher.set_pods([echo])
    assert woken == []
    assert node.dispatcher.records.get("uid-web").pod is echo  # the newest copy is kept all the same

    before = syncs(node)
    node.dispatcher.set_pods([updated(echo.raw, metadata__labels={"tier": "web"})])
    assert woken == ["uid-web"]
    await until(lambda: syncs(node) > before, what="a sync for the new label")


async def test_a_readiness_gate_set_by_someone_else_wakes_the_worker_and_makes_the_pod_ready(node):
    first = pod(readinessGates=[{"conditionType": "example.com/ready"}])
    node.dispatcher.set_pods([first])
    await until(lambda: node.condition("ContainersReady").get("status") == "True", what="ContainersReady")
    assert node.condition("Ready").get("status") == "False"

    status = copy.deepcopy(node.status())
    status["conditions"].append({"type": "example.com/ready", "status": "True"})
    node.dispatcher.set_pods([updated(first.raw, status=status)])
    await until(lambda: node.condition("Ready").get("status") == "True", what="Ready once the gate is True")
