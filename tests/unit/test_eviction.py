"""evictionHard thresholds as KubeletConfiguration writes them, and when a signal crosses one."""

from __future__ import annotations

import pytest

from pykubelet.api.eviction import DEFAULT_EVICTION_HARD, Threshold, parse_thresholds

GI = 2**30


def test_absolute_threshold_is_read_in_bytes():
    assert parse_thresholds({"memory.available": "100Mi"}) == {
        "memory.available": Threshold("memory.available", quantity=104857600)}


@pytest.mark.parametrize("value, percent", [("10%", 10.0), ("5%", 5.0), ("2.5%", 2.5)])
def test_percentage_threshold_is_read_as_a_percent(value, percent):
    assert parse_thresholds({"nodefs.available": value}) == {
        "nodefs.available": Threshold("nodefs.available", percent=percent)}


def test_the_kubelets_linux_defaults_parse():
    thresholds = parse_thresholds(DEFAULT_EVICTION_HARD)
    assert thresholds == {
        "memory.available": Threshold("memory.available", quantity=100 * 2**20),
        "nodefs.available": Threshold("nodefs.available", percent=10.0),
        "nodefs.inodesFree": Threshold("nodefs.inodesFree", percent=5.0),
        "imagefs.available": Threshold("imagefs.available", percent=15.0),
    }


@pytest.mark.parametrize("signal", ["imagefs.inodesFree", "pid.available", "nodefs.inodesFree"])
def test_every_supported_signal_is_accepted(signal):
    assert signal in parse_thresholds({signal: "1k"})


@pytest.mark.parametrize("signal", ["memory.free", "Memory.available", "cpu.available", ""])
def test_unknown_signal_raises_naming_it(signal):
    with pytest.raises(ValueError) as caught:
        parse_thresholds({signal: "100Mi"})
    assert f"unknown eviction signal {signal!r}" in str(caught.value)


@pytest.mark.parametrize("value", ["lots", "abc%", "%", "100MB", "1Zi"])
def test_bad_value_raises_naming_the_signal_and_the_value(value):
    with pytest.raises(ValueError) as caught:
        parse_thresholds({"memory.available": value})
    assert str(caught.value).startswith("memory.available: ")
    assert repr(value) in str(caught.value)


@pytest.mark.parametrize("value", [
    "150%",    # kubelet: eviction percentage threshold memory.available must be <= 100%
    "-5%",     # kubelet: ... must be >= 0%
    "-100Mi",  # kubelet: eviction threshold memory.available must be positive
])
def test_out_of_range_threshold_is_refused_as_the_kubelet_refuses_it(value):
    with pytest.raises(ValueError, match="memory.available"):
        parse_thresholds({"memory.available": value})


@pytest.mark.parametrize("value", ["0%", "100%"])
def test_zero_and_hundred_percent_switch_the_signal_off(value):
    """The kubelet ignores 0% and 100% thresholds: they never report pressure."""
    thresholds = parse_thresholds({"imagefs.available": value})
    threshold = thresholds.get("imagefs.available")
    assert threshold is None or not threshold.crossed(available=0, capacity=100 * GI)


@pytest.mark.parametrize("available, crossed", [
    (100 * 2**20 - 1, True),
    (100 * 2**20, False),    # exactly at the threshold is not below it
    (100 * 2**20 + 1, False),
    (0, True),
])
def test_absolute_threshold_is_crossed_when_available_drops_below_it(available, crossed):
    threshold = Threshold("memory.available", quantity=100 * 2**20)
    assert threshold.crossed(available, capacity=8 * GI) is crossed


@pytest.mark.parametrize("available, capacity, crossed", [
    (9 * GI, 100 * GI, True),
    (10 * GI, 100 * GI, False),
    (11 * GI, 100 * GI, False),
    (9 * GI, 50 * GI, False),    # the same free space is plenty on a smaller disk
    (4 * GI, 50 * GI, True),
])
def test_percentage_threshold_is_a_share_of_capacity(available, capacity, crossed):
    threshold = Threshold("nodefs.available", percent=10)
    assert threshold.crossed(available, capacity) is crossed
