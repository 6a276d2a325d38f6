"""The agent's directories on the host: made 0750 so other local users cannot look into pods,
and removed without ever leaving them (no symlink followed, no mount entered)."""

from __future__ import annotations

import os
import pathlib
import subprocess

import pytest

from pykubelet.runtime import data_dirs, paths, podfiles
from pykubelet.api.pod import parse_pod
from pykubelet.util import mounts, safe_remove
from pykubelet.volumes import local as local_volumes


def mode(path) -> int:
    return os.stat(path).st_mode & 0o7777


@pytest.fixture
def open_umask():
    """umask 0: a mode that only comes from the umask would show up as world-accessible."""
    old = os.umask(0)
    yield
    os.umask(old)


def test_the_root_pods_and_logs_dirs_are_made_0750(tmp_path, open_umask):
    root, logs = tmp_path / "var" / "lib" / "agent", tmp_path / "var" / "log" / "pods"
    data_dirs.setup_data_dirs(str(root), str(logs))
    assert (mode(root), mode(root / "pods"), mode(logs)) == (0o750, 0o750, 0o750)


def test_a_pods_dir_an_older_agent_made_0755_is_closed(tmp_path):
    (tmp_path / "root" / "pods").mkdir(parents=True)
    os.chmod(tmp_path / "root" / "pods", 0o755)
    data_dirs.setup_data_dirs(str(tmp_path / "root"), str(tmp_path / "logs"))
    assert mode(tmp_path / "root" / "pods") == 0o750


def test_each_pods_dirs_are_0750_and_its_termination_file_0666(tmp_path, open_umask):
    data_dirs.ensure_pod_dirs(str(tmp_path), "u1")
    assert mode(paths.pod_dir(str(tmp_path), "u1")) == 0o750
    assert mode(paths.volumes_dir(str(tmp_path), "u1")) == 0o750
    pod = parse_pod({"metadata": {"name": "p", "uid": "u1"}, "spec": {"containers": [{"name": "app", "image": "b"}]}},
                    where="t")
    mount = podfiles.termination_message_mount(str(tmp_path), pod, pod.containers[0])
    assert mode(os.path.dirname(mount.host_path)) == 0o750
    assert mode(os.path.dirname(os.path.dirname(mount.host_path))) == 0o750  # containers/
    assert mode(mount.host_path) == 0o666


@pytest.mark.parametrize("uid", ["", ".", "..", "../x", "/tmp/x"])
def test_pod_dirs_are_never_made_or_removed_for_a_uid_that_is_a_path(tmp_path, uid):
    with pytest.raises(safe_remove.UnsafeName):
        data_dirs.ensure_pod_dirs(str(tmp_path / "root"), uid)
    with pytest.raises(safe_remove.UnsafeName):
        local_volumes.teardown_volumes(str(tmp_path / "root"), uid)


def test_a_path_uid_from_old_runtime_labels_removes_nothing_outside(tmp_path):
    outside = tmp_path / "x"
    (outside / "volumes").mkdir(parents=True)
    (outside / "keep").write_text("precious")
    (tmp_path / "root" / "pods").mkdir(parents=True)
    with pytest.raises(safe_remove.UnsafeName):
        local_volumes.teardown_volumes(str(tmp_path / "root"), "../../x")
    with pytest.raises(safe_remove.UnsafeName):
        data_dirs.remove_pod_log_dir(str(tmp_path / "root"), "default", "p", "../../x")
    assert (outside / "keep").read_text() == "precious"


def tree(tmp_path: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """pods/u1 with files, and a directory outside that a symlink inside points to."""
    pods, outside = tmp_path / "pods", tmp_path / "outside"
    (pods / "u1" / "volumes" / "kubernetes.io~empty-dir" / "v").mkdir(parents=True)
    (pods / "u1" / "volumes" / "kubernetes.io~empty-dir" / "v" / "f").write_text("data")
    outside.mkdir()
    (outside / "keep").write_text("precious")
    os.symlink(outside, pods / "u1" / "volumes" / "kubernetes.io~empty-dir" / "v" / "link")
    os.symlink(outside / "keep", pods / "u1" / "file-link")
    return pods, outside


def test_removal_takes_the_whole_directory_but_no_link_target(tmp_path):
    pods, outside = tree(tmp_path)
    assert safe_remove.remove_child_dir(str(pods), "u1")
    assert not (pods / "u1").exists() and (outside / "keep").read_text() == "precious"


def test_a_pod_dir_that_is_a_symlink_loses_only_the_link(tmp_path):
    pods, outside = tree(tmp_path)
    os.symlink(outside, pods / "u2")
    assert safe_remove.remove_child_dir(str(pods), "u2")
    assert not os.path.lexists(pods / "u2") and (outside / "keep").exists()


def test_removal_stops_at_a_mount_point_listed_in_mountinfo(tmp_path, monkeypatch):
    # A bind mount of the same filesystem has the same st_dev: only mountinfo tells.
    pods, _ = tree(tmp_path)
    mounted = pods / "u1" / "volumes" / "kubernetes.io~empty-dir" / "v"
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(f"1 0 8:1 / / rw - ext4 /dev/sda1 rw\n"
                         f"99 1 8:1 /host/data {str(mounted).replace(' ', chr(92) + '040')} rw - ext4 /dev/sda1 rw\n")
    monkeypatch.setattr(mounts, "MOUNTINFO", str(mountinfo))
    assert not safe_remove.remove_child_dir(str(pods), "u1")
    assert (mounted / "f").read_text() == "data", "nothing on the mount was removed"
    assert not (pods / "u1" / "file-link").exists(), "what is beside the mount is removed"


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_removal_never_enters_another_filesystem(tmp_path):
    pods, _ = tree(tmp_path)
    mounted = pods / "u1" / "volumes" / "kubernetes.io~empty-dir" / "mem"
    mounted.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(mounted)], check=True)
    try:
        (mounted / "on-tmpfs").write_text("x")
        assert not safe_remove.remove_child_dir(str(pods), "u1")
        assert (mounted / "on-tmpfs").exists()
    finally:
        subprocess.run(["umount", str(mounted)], check=True)
    assert safe_remove.remove_child_dir(str(pods), "u1")
    assert not (pods / "u1").exists()


def test_directories_nested_deeper_than_any_stack_are_removed(tmp_path):
    # A pod can nest directories in an emptyDir without limit; removal must neither recurse
    # that deep nor hold a file descriptor per level.
    pods = tmp_path / "pods"
    fd = os.open(tmp_path, os.O_RDONLY)
    for name in ("pods", "u1", *(["d"] * 1200)):  # past Python's recursion limit
        os.mkdir(name, dir_fd=fd)
        child = os.open(name, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = child
    with open(os.open("leaf", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd), "w") as f:
        f.write("deep")
    os.close(fd)
    assert safe_remove.remove_child_dir(str(pods), "u1")
    assert os.listdir(pods) == []
