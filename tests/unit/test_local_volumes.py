"""Node-local volumes as the kubelet makes them: emptyDir modes and a missing subPath with its volume's mode."""

from __future__ import annotations

import os

import pytest

from pykubelet.api.pod import parse_pod
from pykubelet.runtime.env import ContainerConfigError
from pykubelet.volumes.local import container_mounts


def pod(sub_path: str):
    return parse_pod({"metadata": {"name": "p", "uid": "u1"}, "spec": {
        "volumes": [{"name": "v", "emptyDir": {}}],
        "containers": [{"name": "c", "image": "busybox:1.36",
                        "volumeMounts": [{"name": "v", "mountPath": "/test-volume", "subPath": sub_path}]}]}},
        where="test")


def test_a_missing_sub_path_gets_the_volumes_mode_whatever_the_umask(tmp_path):
    volume = tmp_path / "v"
    volume.mkdir()
    os.chmod(volume, 0o2777)  # an emptyDir of a pod with an fsGroup
    p = pod("a/b")
    (mount,) = container_mounts(p, p.containers[0], {"v": str(volume)})
    assert mount.host_path == str(volume / "a" / "b")
    for made in (volume / "a", volume / "a" / "b"):
        assert made.stat().st_mode & 0o7777 == 0o2777


def test_a_sub_path_may_not_leave_its_volume(tmp_path):
    p = pod("../escape")
    with pytest.raises(ContainerConfigError, match="must stay inside"):
        container_mounts(p, p.containers[0], {"v": str(tmp_path)})


def test_an_empty_dir_on_disk_is_world_writable_and_setgid_to_the_fs_group(tmp_path):
    from pykubelet.volumes.local import setup_volumes
    grouped = parse_pod({"metadata": {"name": "p", "uid": "u1"}, "spec": {
        "securityContext": {"fsGroup": 123}, "volumes": [{"name": "v", "emptyDir": {}}],
        "containers": [{"name": "c", "image": "busybox:1.36"}]}}, where="test")
    path = setup_volumes(str(tmp_path), grouped)["v"]
    assert os.stat(path).st_mode & 0o7777 == 0o2777 and os.stat(path).st_gid == 123
    setup_volumes(str(tmp_path), grouped)  # every sync: the same
    assert os.stat(path).st_mode & 0o7777 == 0o2777
