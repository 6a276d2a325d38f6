"""subPath mounts as the kubelet makes them safe: what a pod puts in its volume (symlinks, FIFOs,
backsteps) never gets another host path mounted, and what it is allowed is bind-mounted from
the opened file into volume-subpaths/. Bind mounts need root, as the agent does."""

from __future__ import annotations

import os
import pathlib

import pytest

from pykubelet.api.pod import parse_pod
from pykubelet.runtime.env import ContainerConfigError
from pykubelet.util import mounts
from pykubelet.volumes import subpath
from pykubelet.volumes.local import container_mounts, teardown_volumes
from pykubelet.volumes.safe_open import UnsafePath, safe_make_dir, safe_open
from tests.helpers import unmount_under

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="bind mounts need root")

UID = "11111111-2222-3333-4444-555555555555"


@pytest.fixture
def node(tmp_path):
    """root dir, an emptyDir-like volume and an outside dir standing for the host."""
    root, volume, host = tmp_path / "root", tmp_path / "volume", tmp_path / "host"
    for d in (root, volume, host):
        d.mkdir()
    (host / "secret").write_text("host-only\n")
    yield root, volume, host
    unmount_under(str(tmp_path))  # a failing test must not leave binds behind


def mount(root: pathlib.Path, volume: pathlib.Path, sub_path: str, index: int = 0) -> str:
    return subpath.prepare(str(root), subpath.SubPathMount(UID, "c", "v", index, str(volume), sub_path))


def user_error(root, volume, sub_path) -> str:
    with pytest.raises(ContainerConfigError) as e:
        mount(root, volume, sub_path)
    return str(e.value)


@pytest.mark.parametrize("sub_path,message", [
    ("/etc", "error SubPath `/etc` must not be an absolute path"),
    ("../escape", "unable to provision SubPath `../escape`: must not contain '..'"),
    ("a/../../b", "unable to provision SubPath `a/../../b`: must not contain '..'"),
])
def test_absolute_and_backstepping_sub_paths_are_refused_before_touching_the_disk(node, sub_path, message):
    root, volume, _ = node
    assert user_error(root, volume, sub_path) == message
    assert os.listdir(root) == [] and os.listdir(volume) == []


def test_a_symlink_to_the_host_is_refused_without_naming_host_paths(node):
    root, volume, host = node
    (volume / "x").symlink_to(host)
    message = user_error(root, volume, "x")
    assert message == 'failed to prepare subPath for volumeMount "v" of container "c"'
    assert not mounts.mount_points() & {str(p) for p in root.rglob("*")}


def test_a_nul_byte_is_a_config_error_not_a_crash(node):
    root, volume, _ = node
    assert "subPath" in user_error(root, volume, "a\0b")


def test_a_symlinked_parent_directory_to_the_host_is_refused(node):
    root, volume, host = node
    (volume / "x").symlink_to(host)
    assert "failed to prepare subPath" in user_error(root, volume, "x/secret")


def test_a_symlink_that_stays_inside_the_volume_is_allowed_as_the_kubelet_allows_it(node):
    # A configMap volume's keys are symlinks into its ..data directory.
    root, volume, _ = node
    (volume / "real").mkdir()
    (volume / "real" / "f").write_text("inside\n")
    (volume / "link").symlink_to("real")
    target = mount(root, volume, "link/f")
    assert pathlib.Path(target).read_text() == "inside\n"


def test_a_directory_is_bind_mounted_into_volume_subpaths_and_reused(node):
    root, volume, _ = node
    (volume / "d").mkdir()
    (volume / "d" / "data").write_text("in-d\n")
    target = mount(root, volume, "d", index=2)
    assert target == str(root / "pods" / UID / "volume-subpaths" / "v" / "c" / "2")
    assert mounts.is_mount_point(target) and os.stat(os.path.dirname(target)).st_mode & 0o777 == 0o750
    assert (pathlib.Path(target) / "data").read_text() == "in-d\n"
    assert mount(root, volume, "d", index=2) == target  # the same file: the bind is kept
    assert sum(p == target for p in _mount_lines()) == 1


def test_a_bind_of_another_file_is_replaced(node):
    root, volume, _ = node
    for name in ("one", "two"):
        (volume / name).mkdir()
        (volume / name / "which").write_text(name)
    target = mount(root, volume, "one")
    assert mount(root, volume, "two") == target
    assert (pathlib.Path(target) / "which").read_text() == "two"
    assert sum(p == target for p in _mount_lines()) == 1


def test_a_file_and_a_fifo_get_a_file_as_mount_point(node):
    root, volume, _ = node
    (volume / "file").write_text("a file\n")
    os.mkfifo(volume / "fifo")
    target = mount(root, volume, "file", index=0)
    assert pathlib.Path(target).read_text() == "a file\n"
    fifo_target = mount(root, volume, "fifo", index=1)  # no open: a FIFO must not block us
    assert pathlib.Path(fifo_target).is_fifo() and mounts.is_mount_point(fifo_target)


def test_a_missing_sub_path_is_made_with_the_volumes_mode_whatever_the_umask(node):
    root, volume, _ = node
    os.chmod(volume, 0o2777)  # an emptyDir of a pod with an fsGroup
    old = os.umask(0o077)
    try:
        target = mount(root, volume, "a/b")
    finally:
        os.umask(old)
    for made in (volume / "a", volume / "a" / "b"):
        assert made.stat().st_mode & 0o7777 == 0o2777
    assert os.path.samestat(os.stat(target), os.stat(volume / "a" / "b"))


def test_making_a_missing_sub_path_never_goes_through_a_symlink(node):
    root, volume, host = node
    (volume / "x").symlink_to(host)
    assert user_error(root, volume, "x/new") == \
        'failed to create subPath directory for volumeMount "v" of container "c"'
    assert not (host / "new").exists()
    # A dangling link to the host is not made into a directory there either.
    (volume / "dangling").symlink_to(host / "made-by-pod")
    assert user_error(root, volume, "dangling/y") == \
        'failed to create subPath directory for volumeMount "v" of container "c"'
    assert not (host / "made-by-pod").exists()


def test_safe_make_dir_refuses_an_existing_parent_that_leads_outside(tmp_path):
    base, host = tmp_path / "base", tmp_path / "host"
    base.mkdir(), host.mkdir()
    (base / "p").symlink_to(host)
    with pytest.raises(OSError):
        safe_make_dir(str(base / "p" / "q"), str(base), 0o755)
    assert list(host.iterdir()) == []


def test_safe_open_refuses_any_symlink_on_the_way_even_inside_the_base(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "l").symlink_to("d")
    with pytest.raises(UnsafePath, match="unexpected symlink"):
        safe_open(str(tmp_path / "l"), str(tmp_path))
    with pytest.raises(UnsafePath, match="outside of allowed base"):
        safe_open(str(tmp_path.parent), str(tmp_path))
    fd = safe_open(str(tmp_path / "d"), str(tmp_path))
    try:
        assert os.path.samestat(os.fstat(fd), os.stat(tmp_path / "d"))
    finally:
        os.close(fd)


def test_teardown_unmounts_the_binds_without_touching_what_they_show(node):
    root, volume, _ = node
    (volume / "d").mkdir()
    (volume / "d" / "keep").write_text("volume data\n")
    target = mount(root, volume, "d")
    assert teardown_volumes(str(root), UID)
    assert not mounts.is_mount_point(target) and not (root / "pods" / UID).exists()
    assert (volume / "d" / "keep").read_text() == "volume data\n"


def test_teardown_keeps_a_pod_dir_while_something_under_it_stays_mounted(node, monkeypatch):
    root, volume, _ = node
    (volume / "d").mkdir()
    (volume / "d" / "keep").write_text("volume data\n")
    target = mount(root, volume, "d")
    monkeypatch.setattr(subpath, "_unmount", lambda path: (_ for _ in ()).throw(OSError("busy")))
    assert not teardown_volumes(str(root), UID)
    assert mounts.is_mount_point(target) and (volume / "d" / "keep").exists()


def test_sub_path_expr_is_expanded_with_the_containers_env_then_checked(node):
    root, volume, _ = node
    pod = parse_pod({"metadata": {"name": "p", "uid": UID}, "spec": {
        "volumes": [{"name": "v", "emptyDir": {}}],
        "containers": [{"name": "c", "image": "busybox:1.36", "volumeMounts": [
            {"name": "v", "mountPath": "/data", "subPathExpr": "$(POD)/logs"}]}]}}, where="test")
    (m,) = container_mounts(str(root), pod, pod.containers[0], {"v": str(volume)}, env={"POD": "p"})
    assert os.path.samestat(os.stat(m.host_path), os.stat(volume / "p" / "logs"))
    with pytest.raises(ContainerConfigError, match="missing value for POD"):
        container_mounts(str(root), pod, pod.containers[0], {"v": str(volume)}, env={})
    with pytest.raises(ContainerConfigError, match="must not contain '..'"):
        container_mounts(str(root), pod, pod.containers[0], {"v": str(volume)}, env={"POD": ".."})


def _mount_lines() -> list[str]:
    with open("/proc/self/mountinfo") as f:
        return [line.split(" ")[4] for line in f]


def test_a_bind_left_behind_is_reported_by_the_leak_check(node):
    from pykubelet.tools.leak_checks import Alive, leaked_mounts
    root, volume, _ = node
    (volume / "d").mkdir()
    target = mount(root, volume, "d")
    assert target not in {leak.what for leak in leaked_mounts(Alive(pod_uids={UID}))}  # its pod is alive
    assert [(leak.kind, leak.owner) for leak in leaked_mounts(Alive()) if leak.what == target] == [("mount", UID)]


def test_a_volume_name_that_is_a_path_is_refused_naming_the_field():
    from pykubelet.api.errors import InvalidObject
    with pytest.raises(InvalidObject, match=r"spec\.volumes\[0\]\.name"):
        parse_pod({"metadata": {"name": "p", "uid": UID}, "spec": {
            "volumes": [{"name": "../../../../tmp/x", "emptyDir": {}}],
            "containers": [{"name": "c", "image": "busybox:1.36", "volumeMounts": [
                {"name": "../../../../tmp/x", "mountPath": "/data", "subPath": "s"}]}]}}, where="test")
