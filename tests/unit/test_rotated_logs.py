"""The rules of a container log rotation (which files go, which are compressed, the new name)
and the file work that carries them out without following a symlink."""

from __future__ import annotations

import errno
import gzip
import os
import stat
from datetime import datetime, timedelta, timezone

import pytest

from pykubelet.runtime import rotated_logs
from pykubelet.runtime.log_files import LogDirectory, NotBeneathLogsRoot, remove_log_files
from pykubelet.runtime.rotated_logs import plan_rotation

OLD, MID, NEW = "0.log.20260101-000000", "0.log.20260101-000100", "0.log.20260101-000200"


def test_rotated_files_are_the_live_files_name_and_a_dot_suffix():
    names = ["0.log", "0.log.20260101-000000", "0.log.20260101-000000.gz", "10.log.20260101-000000", "0.logx",
             "0.log.", "1.log"]
    assert rotated_logs.rotated_names("0.log", names) == ["0.log.20260101-000000", "0.log.20260101-000000.gz"]


def test_the_rotated_name_is_the_utc_time_in_the_kubelets_layout():
    when = datetime(2026, 3, 1, 1, 2, 3, tzinfo=timezone(timedelta(hours=2)))
    assert rotated_logs.rotated_name("0.log", when) == "0.log.20260228-230203"


def test_left_overs_of_a_cut_short_rotation_are_removed():
    # a compression cut short (.tmp) and one whose original was not removed yet (a .gz twin)
    plan = plan_rotation([f"{OLD}.gz", OLD, f"{MID}.tmp"], max_files=5)
    assert plan.remove == (OLD, f"{MID}.tmp")
    assert plan.compress == ()
    assert plan.kept == (f"{OLD}.gz",)


def test_the_oldest_go_until_max_files_minus_two_stay_and_those_are_compressed():
    rotated = [NEW, f"{MID}.gz", f"{OLD}.gz"]
    assert plan_rotation(rotated, max_files=3) == rotated_logs.RotationPlan(
        remove=(f"{OLD}.gz", f"{MID}.gz"), compress=(NEW,), kept=(f"{NEW}.gz",))
    assert plan_rotation(rotated, max_files=4).remove == (f"{OLD}.gz",)
    assert plan_rotation(rotated, max_files=5) == rotated_logs.RotationPlan(
        remove=(), compress=(NEW,), kept=(f"{OLD}.gz", f"{MID}.gz", f"{NEW}.gz"))


def test_with_two_files_only_the_live_one_and_the_newest_rotation_stay():
    assert plan_rotation([f"{OLD}.gz", NEW], max_files=2).remove == (f"{OLD}.gz", NEW)


def test_a_name_already_used_this_second_is_taken():
    assert rotated_logs.name_taken(OLD, [OLD]) and rotated_logs.name_taken(OLD, [f"{OLD}.gz"])
    assert not rotated_logs.name_taken(OLD, [f"{OLD}.tmp", MID])


@pytest.fixture
def container_dir(tmp_path):
    directory = tmp_path / "logs" / "default_web_uid1" / "main"
    directory.mkdir(parents=True)
    return directory


def test_compression_keeps_the_content_and_the_mode_and_leaves_no_temporary_file(tmp_path, container_dir):
    (container_dir / OLD).write_bytes(b"line\n" * 1000)
    os.chmod(container_dir / OLD, 0o640)
    directory = LogDirectory(str(tmp_path / "logs"), str(container_dir / "0.log"))
    try:
        directory.compress(OLD)
    finally:
        directory.close()
    assert sorted(os.listdir(container_dir)) == [f"{OLD}.gz"]
    assert gzip.decompress((container_dir / f"{OLD}.gz").read_bytes()) == b"line\n" * 1000
    assert stat.S_IMODE(os.stat(container_dir / f"{OLD}.gz").st_mode) == 0o640


def test_a_symlink_in_place_of_a_log_is_never_followed(tmp_path, container_dir):
    secret = tmp_path / "secret"
    secret.write_text("not a log")
    (container_dir / "0.log").symlink_to(secret)
    (container_dir / OLD).symlink_to(secret)
    directory = LogDirectory(str(tmp_path / "logs"), str(container_dir / "0.log"))
    try:
        with pytest.raises(OSError):
            directory.size()
        with pytest.raises(OSError) as caught:
            directory.compress(OLD)
        assert caught.value.errno == errno.ELOOP
    finally:
        directory.close()
    assert secret.read_text() == "not a log" and sorted(os.listdir(tmp_path)) == ["logs", "secret"]


def test_a_symlinked_directory_on_the_way_is_refused(tmp_path, container_dir):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "logs" / "default_evil_uid2").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError) as caught:
        LogDirectory(str(tmp_path / "logs"), str(tmp_path / "logs" / "default_evil_uid2" / "0.log"))
    assert caught.value.errno == errno.ELOOP


@pytest.mark.parametrize("path", ["/etc/hostname", "logs/../etc/0.log", "logs/0.log"])
def test_a_log_outside_the_pod_logs_dir_is_not_the_agents(tmp_path, path):
    with pytest.raises(NotBeneathLogsRoot):
        LogDirectory(str(tmp_path / "logs"), str(tmp_path / path) if not path.startswith("/") else path)


def test_a_removed_containers_live_and_rotated_logs_all_go(tmp_path, container_dir):
    for name in ("0.log", OLD, f"{MID}.gz", "1.log", "1.log.20260101-000000"):
        (container_dir / name).write_text("x")
    remove_log_files(str(tmp_path / "logs"), str(container_dir / "0.log"))
    assert sorted(os.listdir(container_dir)) == ["1.log", "1.log.20260101-000000"]
