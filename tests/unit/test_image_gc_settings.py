"""The image garbage collection settings: the kubelet's defaults, flags and fields, and its checks,
each error naming the field (and flag) it is about."""

from __future__ import annotations

import logging

import pytest

from pykubelet import config
from pykubelet.config import ConfigError, build_parser, settings_from_args

HEADER = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"


def settings(*argv: str):
    return settings_from_args(build_parser().parse_args([*argv, "--hostname-override=n1"]))


def from_file(tmp_path, body: str):
    path = tmp_path / "config.yaml"
    path.write_text(HEADER + body)
    return settings("--config", str(path))


def test_the_defaults_are_the_kubelets():
    gc = settings().image_gc
    assert (gc.high_threshold_percent, gc.low_threshold_percent, gc.minimum_age, gc.maximum_age) == (85, 80, 120, 0)


def test_the_fields_and_flags_are_read_without_a_not_implemented_warning(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger=config.__name__):
        gc = from_file(tmp_path, "imageGCHighThresholdPercent: 70\nimageGCLowThresholdPercent: 50\n"
                                 "imageMinimumGCAge: 5m\nimageMaximumGCAge: 168h\n").image_gc
        flags = settings("--image-gc-high-threshold=90", "--image-gc-low-threshold=60",
                         "--minimum-image-ttl-duration=30s").image_gc
    assert (gc.high_threshold_percent, gc.low_threshold_percent, gc.minimum_age, gc.maximum_age) == (70, 50, 300,
                                                                                                     604800)
    assert (flags.high_threshold_percent, flags.low_threshold_percent, flags.minimum_age) == (90, 60, 30)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_zero_minimum_age_in_the_file_is_the_default_but_on_the_flag_is_zero(tmp_path):
    assert from_file(tmp_path, "imageMinimumGCAge: 0s\n").image_gc.minimum_age == 120  # kubeadm writes 0s
    assert settings("--minimum-image-ttl-duration=0s").image_gc.minimum_age == 0


def test_a_high_threshold_of_zero_in_the_file_is_zero_not_the_default(tmp_path):
    with pytest.raises(ConfigError, match="imageGCLowThresholdPercent .* 80 must be less than "
                                          "imageGCHighThresholdPercent .* 0"):
        from_file(tmp_path, "imageGCHighThresholdPercent: 0\n")


@pytest.mark.parametrize("argv, error", [
    (["--image-gc-high-threshold=101"], "flag --image-gc-high-threshold: must be between 0 and 100, inclusive"),
    (["--image-gc-low-threshold=-1"], "flag --image-gc-low-threshold: must be between 0 and 100, inclusive"),
    (["--image-gc-high-threshold=80"], "imageGCLowThresholdPercent (--image-gc-low-threshold) 80 must be less than "
                                       "imageGCHighThresholdPercent (--image-gc-high-threshold) 80"),
    (["--image-gc-high-threshold=70", "--image-gc-low-threshold=75"], "imageGCLowThresholdPercent"),
    (["--minimum-image-ttl-duration=-1m"], "flag --minimum-image-ttl-duration: must not be a negative duration"),
])
def test_bad_flags_are_errors_naming_the_flag(argv, error):
    with pytest.raises(ConfigError) as failed:
        settings(*argv)
    assert error in str(failed.value)


@pytest.mark.parametrize("body, error", [
    ("imageGCHighThresholdPercent: 150\n", "field imageGCHighThresholdPercent: must be between 0 and 100"),
    ("imageGCLowThresholdPercent: high\n", "field imageGCLowThresholdPercent: must be between 0 and 100"),
    ("imageMaximumGCAge: -1h\n", "field imageMaximumGCAge: must not be a negative duration"),
    ("imageMaximumGCAge: 1m\n", "imageMaximumGCAge 1m0s must be greater than imageMinimumGCAge "
                                "(--minimum-image-ttl-duration) 2m0s"),
])
def test_bad_fields_are_errors_naming_the_field(tmp_path, body, error):
    with pytest.raises(ConfigError) as failed:
        from_file(tmp_path, body)
    assert error in str(failed.value)


def test_a_high_threshold_of_100_with_a_lower_low_one_is_valid():
    assert settings("--image-gc-high-threshold=100").image_gc.high_threshold_percent == 100
