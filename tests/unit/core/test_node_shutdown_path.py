"""A graceful node shutdown through the agent's own pod path on the fake runtime: the regular pod
is stopped with its group's budget, then the critical one, and each pod's status says it was
terminated for the node's shutdown, as the kubelet writes it."""

from __future__ import annotations

import asyncio

import pytest

from pykubelet.config.node_lifecycle import ShutdownSettings
from pykubelet.kube.events import EventRecorder
from pykubelet.node.shutdown import NodeShutdownManager, PodKiller
from pykubelet.node.shutdown_plan import grace_periods
from tests.fakes.runtime import FakeRuntime
from tests.unit.core.harness import Core, clock, pod, until

pytestmark = pytest.mark.looptime


class NoLogind:
    """kill_pods needs no logind: the lock is the manager's business around it."""


async def test_regular_pods_stop_within_their_budget_then_critical_ones_with_the_kubelets_status(tmp_path):
    runtime = FakeRuntime(clock)
    runtime.behave("app", ignores_sigterm=True)  # each pod takes its whole grace period
    node = Core(runtime, tmp_path).start()
    regular = pod("web", "uid-web", terminationGracePeriodSeconds=30)
    critical = pod("dns", "uid-dns", terminationGracePeriodSeconds=30, priority=2_000_000_000,
                   priorityClassName="system-cluster-critical")
    try:
        node.dispatcher.set_pods([regular, critical], "api")
        for uid in ("uid-web", "uid-dns"):
            await until(lambda: node.status(uid).get("phase") == "Running", what=f"{uid} Running")
        dispatcher = node.dispatcher
        killer = PodKiller(dispatcher.active_pods, dispatcher.evict, dispatcher.eviction_done)
        manager = NodeShutdownManager(grace_periods(ShutdownSettings(grace_period=20, grace_period_critical_pods=8)),
                                      NoLogind(), killer, EventRecorder(None, "node-1"), "node-1")
        began = asyncio.get_running_loop().time()
        await manager.kill_pods(dispatcher.active_pods())
        took = asyncio.get_running_loop().time() - began
        # web: min(30, 20 - 8) = 12 s, then dns: min(30, 8) = 8 s, one after the other
        assert [(name, grace) for name, grace, _ in runtime.stops] == [("app", 12), ("app", 8)]
        web_stop, dns_stop = (when for _, _, when in runtime.stops)
        assert dns_stop - web_stop == pytest.approx(12, abs=0.5)
        assert took == pytest.approx(20, abs=1)
        for uid in ("uid-web", "uid-dns"):
            await until(lambda: node.status(uid).get("phase") == "Failed", what=f"{uid} Failed")
            status = node.status(uid)
            assert (status["reason"], status["message"]) == (
                "Terminated", "Pod was terminated in response to imminent node shutdown.")
            disruption = node.condition("DisruptionTarget", uid)
            assert (disruption["status"], disruption["reason"], disruption["message"]) == (
                "True", "TerminationByKubelet", "Pod was terminated in response to imminent node shutdown.")
    finally:
        await node.stop()
