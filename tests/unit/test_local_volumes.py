"""Node-local volumes as the kubelet makes them: emptyDir modes; subPath checks (more in test_subpath.py)."""

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


def test_a_sub_path_may_not_leave_its_volume(tmp_path):
    p = pod("../escape")
    with pytest.raises(ContainerConfigError, match="unable to provision SubPath `../escape`: must not contain '..'"):
        container_mounts(str(tmp_path), p, p.containers[0], {"v": str(tmp_path)})


def test_an_empty_dir_on_disk_is_world_writable_and_setgid_to_the_fs_group(tmp_path):
    from pykubelet.volumes.local import setup_volumes
    grouped = parse_pod({"metadata": {"name": "p", "uid": "u1"}, "spec": {
        "securityContext": {"fsGroup": 123}, "volumes": [{"name": "v", "emptyDir": {}}],
        "containers": [{"name": "c", "image": "busybox:1.36"}]}}, where="test")
    path = setup_volumes(str(tmp_path), grouped)["v"]
    assert os.stat(path).st_mode & 0o7777 == 0o2777 and os.stat(path).st_gid == 123
    setup_volumes(str(tmp_path), grouped)  # every sync: the same
    assert os.stat(path).st_mode & 0o7777 == 0o2777
