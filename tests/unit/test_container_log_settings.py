"""containerLogMaxSize, containerLogMaxFiles, containerLogMaxWorkers, containerLogMonitorInterval:
the kubelet's defaults, its validation (errors naming the field or flag), and /configz's forms."""

from __future__ import annotations

import logging

import pytest

from pykubelet import config
from pykubelet.config import ConfigError, Settings, build_parser, load_config_file, settings_from_args
from pykubelet.server.configz import kubelet_config

HEADER = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"


def settings(*argv: str) -> Settings:
    return settings_from_args(build_parser().parse_args([*argv, "--hostname-override", "n1"]))


def test_the_kubelets_defaults():
    logs = Settings().container_logs
    assert (logs.max_size, logs.max_size_bytes, logs.max_files, logs.max_workers, logs.monitor_interval) == \
        ("10Mi", 10 * 1024 * 1024, 5, 1, 10.0)


def test_fields_and_flags_are_applied_and_not_warned_about(tmp_path, caplog):
    path = tmp_path / "kubelet.yaml"
    path.write_text(HEADER + "containerLogMaxSize: 1.5Ki\ncontainerLogMaxFiles: 3\ncontainerLogMaxWorkers: 2\n"
                             "containerLogMonitorInterval: 1m\n")
    with caplog.at_level(logging.WARNING, logger=config.__name__):
        logs = settings("--config", str(path)).container_logs
        assert (logs.max_size_bytes, logs.max_files, logs.max_workers, logs.monitor_interval) == (1536, 3, 2, 60.0)
        flagged = settings("--config", str(path), "--container-log-max-size", "100Ki",
                           "--container-log-max-files", "2").container_logs
    assert (flagged.max_size_bytes, flagged.max_files) == (102400, 2)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_an_empty_max_size_in_the_file_is_the_default(tmp_path):
    path = tmp_path / "kubelet.yaml"
    path.write_text(HEADER + "containerLogMaxSize: ''\n")
    assert settings("--config", str(path)).container_logs.max_size == "10Mi"


@pytest.mark.parametrize("line, field", [
    ("containerLogMaxFiles: 1", "containerLogMaxFiles"),
    ("containerLogMaxFiles: 0", "containerLogMaxFiles"),  # a pointer field: 0 is a value, not "unset"
    ("containerLogMaxWorkers: 0", "containerLogMaxWorkers"),
    ("containerLogMonitorInterval: 2s", "containerLogMonitorInterval"),
    ("containerLogMonitorInterval: 0s", "containerLogMonitorInterval"),
    ("containerLogMaxSize: 100m", "containerLogMaxSize"),  # not a whole number of bytes
    ("containerLogMaxSize: ten", "containerLogMaxSize"),
    ("containerLogMaxSize: 1024", "containerLogMaxSize"),  # a string field
])
def test_invalid_values_name_the_file_and_the_field(tmp_path, line, field):
    path = tmp_path / "kubelet.yaml"
    path.write_text(HEADER + line + "\n")
    with pytest.raises(ConfigError) as caught:
        load_config_file(str(path), Settings())
    assert f"{path}: field {field}:" in str(caught.value)


@pytest.mark.parametrize("flag, value", [("--container-log-max-files", "1"), ("--container-log-max-size", "1.5")])
def test_invalid_flags_name_the_flag(flag, value):
    with pytest.raises(ConfigError, match=f"flag {flag}:"):
        settings(flag, value)


def test_configz_shows_them_as_the_kubelet_does():
    shown = kubelet_config(settings("--container-log-max-size", "100Ki"))["kubeletconfig"]
    assert {k: shown[k] for k in ("containerLogMaxSize", "containerLogMaxFiles", "containerLogMaxWorkers",
                                  "containerLogMonitorInterval")} == \
        {"containerLogMaxSize": "100Ki", "containerLogMaxFiles": 5, "containerLogMaxWorkers": 1,
         "containerLogMonitorInterval": "10s"}
