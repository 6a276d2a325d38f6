"""The crash-loop restart back-off: immediate first restart, then 10s doubling to 5m, reset after 10m of running."""

from __future__ import annotations

from pykubelet.util.backoff import Backoff
from tests.fakes.clock import ManualClock


def crash_loop(backoff: Backoff, clock: ManualClock, key: str, crashes: int) -> list[float]:
    """Restart a container that exits at once, as soon as the back-off allows; the waits before each restart."""
    waits = []
    for _ in range(crashes):
        exited_at = clock.now
        waited = 0.0
        while backoff.in_backoff_since(key, exited_at):
            clock.now += 1
            waited += 1
        waits.append(waited)
        backoff.next(key, exited_at)  # restarted now, and crashes again at once
    return waits


def test_first_restart_is_immediate():
    clock = ManualClock()
    backoff = Backoff(clock=clock)
    assert not backoff.in_backoff_since("pod_app", clock.now)
    assert backoff.delay("pod_app") == 0.0
    assert backoff.remaining("pod_app", clock.now) == 0.0


def test_restarts_wait_10s_doubling_up_to_5m():
    clock = ManualClock()
    waits = crash_loop(Backoff(clock=clock), clock, "pod_app", 9)
    assert waits == [0, 10, 20, 40, 80, 160, 300, 300, 300]


def test_delay_after_each_recorded_restart():
    clock = ManualClock()
    backoff = Backoff(clock=clock)
    delays = []
    for _ in range(8):
        backoff.next("k", clock.now)
        delays.append(backoff.delay("k"))
    assert delays == [10, 20, 40, 80, 160, 300, 300, 300]


def test_back_off_counts_from_the_exit_time():
    clock = ManualClock(now=0.0)
    backoff = Backoff(clock=clock)
    backoff.next("k", 0.0)
    backoff.next("k", 0.0)  # delay now 20s
    exited_at = 100.0
    clock.now = 119.0
    assert backoff.in_backoff_since("k", exited_at)
    assert backoff.remaining("k", exited_at) == 1.0
    clock.now = 120.0
    assert not backoff.in_backoff_since("k", exited_at)
    assert backoff.remaining("k", exited_at) == 0.0


def test_container_that_ran_over_10_minutes_since_its_last_restart_starts_over():
    clock = ManualClock(now=0.0)
    backoff = Backoff(clock=clock)
    crash_loop(backoff, clock, "k", 6)  # delay is up to 160s
    restarted_at = clock.now
    exited_at = restarted_at + 601  # ran for 10 minutes and a second
    clock.now = exited_at
    assert not backoff.in_backoff_since("k", exited_at)
    backoff.next("k", exited_at)
    assert backoff.delay("k") == 10


def test_container_that_ran_under_10_minutes_keeps_doubling():
    clock = ManualClock(now=0.0)
    backoff = Backoff(clock=clock)
    crash_loop(backoff, clock, "k", 3)  # delay 40s
    exited_at = clock.now + 599
    clock.now = exited_at
    assert backoff.in_backoff_since("k", exited_at)
    backoff.next("k", exited_at)
    assert backoff.delay("k") == 80


def test_forget_drops_every_key_of_one_pod_only():
    clock = ManualClock()
    backoff = Backoff(clock=clock)
    for key in ("uid1_app_h1", "uid1_side_h2", "uid2_app_h1"):
        backoff.next(key, clock.now)
    backoff.forget("uid1")
    assert backoff.delay("uid1_app_h1") == backoff.delay("uid1_side_h2") == 0.0
    assert not backoff.in_backoff_since("uid1_app_h1", clock.now)
    assert backoff.delay("uid2_app_h1") == 10


def test_in_backoff_since_update_counts_from_the_last_recorded_failure():
    clock = ManualClock(now=50.0)
    backoff = Backoff(initial=1.0, maximum=60.0, clock=clock)
    assert not backoff.in_backoff_since_update("sandbox")
    backoff.next("sandbox", clock.now)
    backoff.next("sandbox", clock.now)  # 2s
    clock.now = 51.9
    assert backoff.in_backoff_since_update("sandbox")
    clock.now = 52.0
    assert not backoff.in_backoff_since_update("sandbox")
