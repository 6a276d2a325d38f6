"""Go duration strings as KubeletConfiguration writes them, and the short form back-off messages print."""

from __future__ import annotations

import pytest

from pykubelet.util.durations import format_duration, parse_duration


@pytest.mark.parametrize("text, seconds", [
    ("20s", 20.0),
    ("1m30s", 90.0),
    ("100ms", 0.1),
    ("2h", 7200.0),
    ("0", 0.0),
    ("1.5s", 1.5),
    ("1h2m3s", 3723.0),
    ("500us", 0.0005),
    ("250µs", 0.00025),
    ("10ns", 1e-8),
    (".5s", 0.5),
    ("+5s", 5.0),
    ("-1m", -60.0),
])
def test_go_duration_strings_parse_to_seconds(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", [
    "",        # nothing at all
    "20",      # a number without a unit (only "0" may omit it)
    "soon",
    "1m30",    # the last part has no unit
    "1x",      # unknown unit
    "s",       # a unit without a number
    "1.5.5s",
    " 20s",
    "20s ",
    "1 s",
    "-",       # a sign alone (Go: time: invalid duration "-")
    "+",
])
def test_bad_duration_raises_value_error_naming_the_input(text):
    with pytest.raises(ValueError) as caught:
        parse_duration(text)
    assert repr(text) in str(caught.value)


@pytest.mark.parametrize("value", [None, 20, 1.5])
def test_non_string_duration_is_rejected(value):
    with pytest.raises(ValueError, match=repr(value)):
        parse_duration(value)


@pytest.mark.parametrize("seconds, text", [
    (0, "0s"),
    (10, "10s"),
    (59, "59s"),
    (60, "1m0s"),
    (160, "2m40s"),
    (300, "5m0s"),
    (3600, "1h0m0s"),
    (3661, "1h1m1s"),
    (9.6, "10s"),
])
def test_format_duration_prints_the_kubelet_short_form(seconds, text):
    assert format_duration(seconds) == text
