"""Graceful node shutdown with a fake logind and a fake pod path: the kubelet's groups and
budgets, regular pods before critical ones, the status words, the lock released after and taken
again on a cancelled shutdown, logind's InhibitDelayMaxSec raised, no logind at all, and the record
of the last shutdown (its file and metrics) across a restart."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from pykubelet.api.pod import parse_pod
from pykubelet.config.node_lifecycle import PriorityGracePeriod, ShutdownSettings
from pykubelet.node import shutdown_plan as plan
from pykubelet.node.logind import LogindError, drop_in_text
from pykubelet.node import shutdown, shutdown_state
from pykubelet.node.shutdown import NodeShutdownManager, PodKiller
from pykubelet.node.shutdown_state import ShutdownRecord, ShutdownStateError
from pykubelet.util.metrics import GRACEFUL_SHUTDOWN_END, GRACEFUL_SHUTDOWN_START
from pykubelet.node.status import NodeHealth
from tests.helpers import wait_for
from tests.fakes.clock import ManualClock

REGULAR, CRITICAL = 0, 2_000_000_000


def pod(name: str, priority: int | None = None, grace: int | None = None):
    spec: dict = {"containers": [{"name": "c", "image": "busybox"}]}
    if priority is not None:
        spec["priority"] = priority
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return parse_pod({"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"}, "spec": spec}, "t")


class FakeLogind:
    """logind with InhibitDelayMaxSec `delay`, that a reload raises to what the drop-in says
    (unless `stuck`), and a PrepareForShutdown queue the test feeds."""

    def __init__(self, delay: float = 30.0, stuck: bool = False, missing: bool = False):
        self.delay, self.stuck, self.missing = delay, stuck, missing
        self.drop_in: float | None = None
        self.reloads = 0
        self.next_fd = 100
        self.held: set[int] = set()
        self.released: list[int] = []
        self.signals: asyncio.Queue[bool] = asyncio.Queue()
        self.log: list[str] = []

    async def inhibit_delay(self) -> float:
        if self.missing:
            raise LogindError("cannot reach org.freedesktop.login1 on the system bus: no such file")
        return self.delay

    async def override_inhibit_delay(self, seconds: float) -> None:
        self.drop_in = seconds

    async def reload(self) -> None:
        self.reloads += 1
        if not self.stuck and self.drop_in is not None:
            self.delay = self.drop_in

    async def inhibit(self) -> int:
        self.next_fd += 1
        self.held.add(self.next_fd)
        self.log.append(f"inhibit {self.next_fd}")
        return self.next_fd

    def release(self, lock: int) -> None:
        self.held.discard(lock)
        self.released.append(lock)
        self.log.append(f"release {lock}")

    async def shutdown_signals(self):
        while True:
            yield await self.signals.get()


class FakePods:
    """The pod path: a killed pod is gone `takes[name]` seconds (of the fake clock) after its kill;
    each check for it moves the clock on by `step`, as time passes while the manager waits."""

    def __init__(self, pods, clock: ManualClock, takes: dict[str, float] | None = None, step: float = 0.5,
                 reports_take: dict[str, float] | None = None):
        self.pods, self.clock, self.takes, self.step = pods, clock, takes or {}, step
        self.reports_take = reports_take or {}  # seconds after its kill until a pod's status is in the apiserver
        self.retries: list[float] = []
        self.kills: list[tuple[str, str, str, int, float]] = []
        self.gone_at: dict[str, float] = {}
        self.log: list[str]

    def killer(self, log: list[str]) -> PodKiller:
        self.log = log
        return PodKiller(active_pods=lambda: list(self.pods), kill=self.kill, killed=self.killed,
                         reported=self.reported, retry_reports=lambda: self.retries.append(self.clock.now))

    def kill(self, uid: str, reason: str, message: str, grace: int) -> bool:
        name = uid.removeprefix("uid-")
        self.kills.append((name, reason, message, grace, self.clock.now))
        self.gone_at[uid] = self.clock.now + self.takes.get(name, 1.0)
        self.log.append(f"kill {name}")
        return True

    def killed(self, uid: str) -> bool:
        self.clock.now += self.step
        return self.clock.now >= self.gone_at[uid]

    def reported(self, uid: str) -> bool:
        self.clock.now += self.step
        return self.clock.now >= self.gone_at[uid] + self.reports_take.get(uid.removeprefix("uid-"), 0.0)


class Recorder:
    def __init__(self):
        self.events = []

    def record(self, ref, kind, reason, message):
        self.events.append((ref["name"], kind, reason, message))


def manager(logind: FakeLogind, pods: FakePods, clock: ManualClock, periods=None, changes=None, state_file=None):
    periods = periods or plan.grace_periods(ShutdownSettings(grace_period=20, grace_period_critical_pods=10))
    return NodeShutdownManager(periods, logind, pods.killer(logind.log), Recorder(), "node-1",
                               on_change=lambda: (changes if changes is not None else []).append(1),
                               clock=clock, poll=0, state_file=state_file,
                               wall_clock=lambda: 1_800_000_000 + clock.now)


@pytest.fixture(autouse=True)
def quick_reload(monkeypatch):
    """logind is polled after a reload from 0.1 s on, doubling: here from 1 ms."""
    monkeypatch.setattr(shutdown, "RELOAD_FIRST_WAIT", 0.001)


async def started(logind: FakeLogind, m: NodeShutdownManager) -> asyncio.Task:
    task = asyncio.create_task(m.run())
    await wait_for(lambda: logind.held, 5, f"the lock taken: {logind.log}")
    return task


async def shut_down(logind: FakeLogind) -> None:
    await logind.signals.put(True)
    await wait_for(lambda: not logind.held, 5, f"the lock released: {logind.log}")


async def test_shutdown_kills_regular_pods_then_critical_ones_each_with_its_budget_then_releases_the_lock():
    clock = ManualClock(0.0)
    logind = FakeLogind()
    pods = FakePods([pod("web", grace=30), pod("quick", grace=4), pod("dns", priority=CRITICAL, grace=30),
                     pod("proxy", priority=2_000_001_000)], clock, takes={"web": 3, "quick": 2, "dns": 1})
    changes: list[int] = []
    m = manager(logind, pods, clock, changes=changes)
    task = await started(logind, m)
    lock = next(iter(logind.held))
    await shut_down(logind)
    assert not logind.held and logind.released == [lock]
    # the regular group (10 s: 20 - 10) first, the pod's own grace when shorter; then the critical (10 s)
    assert [(k[0], k[3]) for k in pods.kills] == [("web", 10), ("quick", 4), ("dns", 10), ("proxy", 10)]
    assert logind.log.index("kill dns") > logind.log.index("kill web")
    assert logind.log[-1] == f"release {lock}"
    # the critical group starts once the regular pods are gone (3 s), not at the end of their budget
    assert pods.kills[2][4] == pytest.approx(3.0, abs=0.5)
    assert {(k[1], k[2]) for k in pods.kills} == {("Terminated", "Pod was terminated in response to imminent "
                                                                  "node shutdown.")}
    # the node says why it is not Ready, and said it at once
    assert m.errors() == ["node is shutting down"] and changes == [1]
    assert NodeHealth(runtime_errors=m.errors()).ready() == (False, "KubeletNotReady", "node is shutting down")
    assert m.recorder.events == [("node-1", "Normal", "NodeShutdown", "Shutdown manager detected shutdown event")]
    task.cancel()


async def test_a_group_is_waited_for_at_most_its_budget():
    clock = ManualClock(0.0)
    logind = FakeLogind()
    pods = FakePods([pod("stuck"), pod("db", priority=CRITICAL)], clock, takes={"stuck": 1000, "db": 1})
    m = manager(logind, pods, clock)
    task = await started(logind, m)
    await shut_down(logind)
    started_at = {k[0]: k[4] for k in pods.kills}
    assert started_at["stuck"] == 0 and 10 <= started_at["db"] <= 10.5  # the regular budget ran out
    assert not logind.held
    task.cancel()


async def test_the_lock_waits_for_the_killed_pods_statuses_to_reach_the_apiserver_until_the_budget_ends():
    """A status write that has not gone through (a slow apiserver) would go down with the machine,
    leaving the pod Running in the API: the rest of the whole budget is spent getting it there."""
    clock = ManualClock(0.0)
    logind = FakeLogind()
    pods = FakePods([pod("web"), pod("dns", priority=CRITICAL)], clock, takes={"web": 2, "dns": 1},
                    reports_take={"web": 6})
    m = manager(logind, pods, clock)
    task = await started(logind, m)
    await shut_down(logind)
    released_at = clock.now
    assert 8 <= released_at < 12  # web's status went through 6 s after its kill: not at the kills' end (~3 s)
    assert len(pods.retries) >= 3 and all(b - a >= 1 for a, b in zip(pods.retries, pods.retries[1:]))
    task.cancel()

    clock = ManualClock(0.0)
    logind = FakeLogind()
    pods = FakePods([pod("web")], clock, takes={"web": 2}, reports_take={"web": 1000})
    task = await started(logind, manager(logind, pods, clock))
    await shut_down(logind)
    assert 20 <= clock.now <= 20.5  # never reported: released when the whole budget (20 s) is spent
    task.cancel()


async def test_a_cancelled_shutdown_takes_the_lock_again_and_the_node_is_ready_again():
    clock = ManualClock(0.0)
    logind = FakeLogind()
    m = manager(logind, FakePods([], clock), clock)
    task = await started(logind, m)
    first = next(iter(logind.held))
    await shut_down(logind)
    assert not logind.held and m.errors()
    await logind.signals.put(False)
    await wait_for(lambda: logind.held, 5, "the lock taken again")
    assert len(logind.held) == 1 and first not in logind.held  # a new lock for the next shutdown
    assert m.errors() == []
    assert m.recorder.events[-1][3] == "Shutdown manager detected shutdown cancellation"
    task.cancel()


async def test_a_short_inhibit_delay_is_raised_with_the_drop_in_and_a_reload_before_the_lock():
    clock = ManualClock(0.0)
    logind = FakeLogind(delay=5)
    task = await started(logind, manager(logind, FakePods([], clock), clock))
    assert (logind.drop_in, logind.reloads, logind.delay) == (20, 1, 20)
    assert drop_in_text(20) == "# Kubelet logind override\n[Login]\nInhibitDelayMaxSec=20\n"
    task.cancel()
    logind = FakeLogind(delay=30)  # long enough already: left alone
    task = await started(logind, manager(logind, FakePods([], clock), clock))
    assert (logind.drop_in, logind.reloads) == (None, 0)
    task.cancel()


async def test_without_logind_the_agent_runs_on_without_graceful_shutdown_said_once(caplog):
    clock = ManualClock(0.0)
    for logind in (FakeLogind(missing=True), FakeLogind(delay=5, stuck=True)):
        m = manager(logind, FakePods([], clock), clock)
        with caplog.at_level(logging.WARNING):
            await asyncio.wait_for(m.run(), 10)  # returns: never raises, never retries
        warnings = [r.getMessage() for r in caplog.records if "Graceful node shutdown is off" in r.getMessage()]
        assert len(warnings) == 1 and not logind.held and m.errors() == []
        caplog.clear()
    assert "InhibitDelayMaxSec to update to 20s" in warnings[0]


def test_the_two_durations_become_two_priority_groups_as_the_kubelet_migrates_them():
    assert plan.grace_periods(ShutdownSettings(grace_period=20, grace_period_critical_pods=10)) == [
        PriorityGracePeriod(REGULAR, 10), PriorityGracePeriod(CRITICAL, 10)]
    assert plan.grace_periods(ShutdownSettings(grace_period=30)) == [PriorityGracePeriod(REGULAR, 30),
                                                                     PriorityGracePeriod(CRITICAL, 0)]
    assert plan.grace_periods(ShutdownSettings()) == []  # off
    by_priority = [PriorityGracePeriod(100000, 5), PriorityGracePeriod(0, 20), PriorityGracePeriod(CRITICAL, 8)]
    assert [p.priority for p in plan.grace_periods(ShutdownSettings(by_pod_priority=by_priority))] == [
        0, 100000, CRITICAL]
    assert plan.period_requested(by_priority) == 33


def test_each_pod_joins_the_highest_group_not_above_its_priority():
    periods = [PriorityGracePeriod(10, 5), PriorityGracePeriod(1000, 10), PriorityGracePeriod(CRITICAL, 8)]
    pods = [pod("none"), pod("low", priority=-5), pod("ten", priority=10), pod("mid", priority=999),
            pod("high", priority=5000), pod("node", priority=2_000_001_000)]
    groups = plan.group_pods(periods, pods)
    assert [[p.name for p in g.pods] for g in groups] == [["none", "low", "ten", "mid"], ["high"], ["node"]]
    assert plan.pod_grace(pod("x", grace=3), 10) == 3 and plan.pod_grace(pod("y"), 10) == 10


def test_a_node_shutting_down_turns_new_pods_away_in_the_kubelets_words():
    from pykubelet.pods.admission import Allocatable, Rejection, admit

    room = Allocatable(pods=10, cpu_millis=4000, memory_bytes=2**32)
    assert admit(pod("late"), [], "node-1", room) is None
    assert admit(pod("late"), [], "node-1", room, shutting_down=True) == Rejection(
        "NodeShutdown", "Pod was rejected as the node is shutting down.")


def gauges() -> tuple[float, float]:
    return GRACEFUL_SHUTDOWN_START._value.get(), GRACEFUL_SHUTDOWN_END._value.get()


async def test_the_last_shutdowns_start_and_end_are_kept_on_disk_and_reported_after_the_restart(tmp_path):
    state = str(tmp_path / "graceful_node_shutdown_state")
    GRACEFUL_SHUTDOWN_START.set(0)
    GRACEFUL_SHUTDOWN_END.set(0)
    clock = ManualClock(0.0)
    logind = FakeLogind()
    pods = FakePods([pod("web")], clock, takes={"web": 3})
    task = await started(logind, manager(logind, pods, clock, state_file=state))
    assert gauges() == (0, 0)  # no shutdown on record yet
    await shut_down(logind)
    task.cancel()
    record = shutdown_state.load(state)
    assert record.start == 1_800_000_000 and 1_800_000_003 <= record.end <= 1_800_000_004
    assert gauges() == (1_800_000_000, int(record.end))
    # the file as the kubelet writes it: Go's RFC 3339 times under its two keys
    assert set(json.loads(open(state).read())) == {"startTime", "endTime"}

    # after the reboot, a new agent's metrics say when the last shutdown ran and that it ended
    GRACEFUL_SHUTDOWN_START.set(0)
    GRACEFUL_SHUTDOWN_END.set(0)
    logind = FakeLogind()
    task = await started(logind, manager(logind, FakePods([], clock), clock, state_file=state))
    assert gauges() == (1_800_000_000, int(record.end))
    task.cancel()


async def test_a_machine_gone_before_the_end_leaves_a_start_with_no_end_and_a_bad_file_is_only_logged(
        tmp_path, caplog):
    state = str(tmp_path / "graceful_node_shutdown_state")
    # as the kubelet leaves it when the machine went mid-shutdown: nine digits, its zone, Go's zero end
    with open(state, "w") as f:
        f.write('{"startTime":"2026-12-07T18:00:00.123456789+01:00","endTime":"0001-01-01T00:00:00Z"}')
    assert shutdown_state.load(state) == ShutdownRecord(start=1_796_662_800.123456, end=None)
    GRACEFUL_SHUTDOWN_START.set(0)
    GRACEFUL_SHUTDOWN_END.set(0)
    clock = ManualClock(0.0)
    logind = FakeLogind()
    task = await started(logind, manager(logind, FakePods([], clock), clock, state_file=state))
    assert gauges() == (1_796_662_800, 0)
    task.cancel()

    with open(state, "w") as f:
        f.write('{"startTime": "yesterday"}')
    with pytest.raises(ShutdownStateError, match=r"graceful_node_shutdown_state: startTime is not an RFC 3339"):
        shutdown_state.load(state)
    logind = FakeLogind()
    with caplog.at_level(logging.ERROR):
        task = await started(logind, manager(logind, FakePods([], clock), clock, state_file=state))
    assert any("Failed to load graceful shutdown state" in r.getMessage() for r in caplog.records)
    assert logind.held  # the watch goes on
    task.cancel()
