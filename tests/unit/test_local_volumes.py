"""Node-local volumes as the kubelet makes them: emptyDir modes; subPath checks (more in test_subpath.py)."""

from __future__ import annotations

import os

import pytest

from pykubelet.api.pod import parse_pod
from pykubelet.cri.v1 import api_pb2 as api
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


def host_path_pod(*volumes: dict):
    return parse_pod({"metadata": {"name": "p", "uid": "u1"}, "spec": {
        "volumes": list(volumes), "containers": [{"name": "c", "image": "busybox:1.36"}]}}, where="test")


@pytest.mark.parametrize("kind, make, error", [
    ("Directory", None, "hostPath type check failed: {path} is not a directory"),
    ("Directory", "file", "hostPath type check failed: {path} is not a directory"),
    ("DirectoryOrCreate", "file", "hostPath type check failed: {path} is not a directory"),
    ("File", "dir", "hostPath type check failed: {path} is not a file"),
    ("FileOrCreate", "dir", "hostPath type check failed: {path} is not a file"),
    ("Socket", "file", "hostPath type check failed: {path} is not a socket file"),
    ("Sideways", "dir", "Sideways is an invalid volume type"),
])
def test_a_host_path_of_the_wrong_type_fails_with_the_kubelets_words(tmp_path, kind, make, error):
    from pykubelet.volumes.local import try_setup_volumes
    path = tmp_path / "host"
    if make == "file":
        path.write_text("x")
    elif make == "dir":
        path.mkdir()
    p = host_path_pod({"name": "h", "hostPath": {"path": str(path), "type": kind}})
    assert try_setup_volumes(str(tmp_path / "root"), p) == {"h": error.format(path=path)}


def test_a_host_path_with_a_backstep_is_refused(tmp_path):
    from pykubelet.volumes.local import try_setup_volumes
    p = host_path_pod({"name": "h", "hostPath": {"path": f"{tmp_path}/a/../etc"}})
    assert try_setup_volumes(str(tmp_path / "root"), p) == {"h": f"invalid HostPath `{tmp_path}/a/../etc`: "
                                                                 "must not contain '..'"}


def test_or_create_types_make_what_is_missing(tmp_path):
    from pykubelet.volumes.local import try_setup_volumes
    p = host_path_pod({"name": "d", "hostPath": {"path": str(tmp_path / "new" / "dir"), "type": "DirectoryOrCreate"}},
                      {"name": "f", "hostPath": {"path": str(tmp_path / "other" / "f"), "type": "FileOrCreate"}})
    assert try_setup_volumes(str(tmp_path / "root"), p) == {}
    assert (tmp_path / "new" / "dir").is_dir() and (tmp_path / "other" / "f").is_file()


def test_one_failing_volume_does_not_keep_the_others_from_being_set_up(tmp_path):
    from pykubelet.volumes.local import try_setup_volumes
    p = host_path_pod({"name": "missing", "hostPath": {"path": str(tmp_path / "nope"), "type": "Directory"}},
                      {"name": "scratch", "emptyDir": {}})
    assert list(try_setup_volumes(str(tmp_path / "root"), p)) == ["missing"]
    assert (tmp_path / "root" / "pods" / "u1" / "volumes" / "kubernetes.io~empty-dir" / "scratch").is_dir()
    with pytest.raises(ContainerConfigError, match=f"volume missing: hostPath type check failed: {tmp_path}/nope"):
        from pykubelet.volumes.local import setup_volumes
        setup_volumes(str(tmp_path / "root"), p)


def test_a_mount_of_a_volume_not_set_up_is_an_error_never_left_out(tmp_path):
    claim = parse_pod({"metadata": {"name": "p", "uid": "u1"}, "spec": {
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "d"}}],
        "containers": [{"name": "c", "image": "busybox:1.36", "volumeMounts": [{"name": "data", "mountPath": "/d"}]}]}},
        where="test")
    with pytest.raises(ContainerConfigError, match="volumeMount 'data': its volume is not set up"):
        container_mounts(str(tmp_path), claim, claim.containers[0], {})


@pytest.mark.parametrize("mode, propagation", [
    (None, api.PROPAGATION_PRIVATE), ("None", api.PROPAGATION_PRIVATE),
    ("HostToContainer", api.PROPAGATION_HOST_TO_CONTAINER), ("Bidirectional", api.PROPAGATION_BIDIRECTIONAL),
])
def test_mount_propagation_reaches_the_runtime_as_the_cri_mode(tmp_path, mode, propagation):
    p = parse_pod({"metadata": {"name": "p", "uid": "u1"}, "spec": {
        "volumes": [{"name": "v", "hostPath": {"path": str(tmp_path)}}],
        "containers": [{"name": "c", "image": "busybox:1.36", "securityContext": {"privileged": True},
                        "volumeMounts": [{"name": "v", "mountPath": "/m", "mountPropagation": mode}]}]}},
        where="test")
    (mount,) = container_mounts(str(tmp_path), p, p.containers[0], {"v": str(tmp_path)})
    assert mount.propagation == propagation and mount.host_path == str(tmp_path)
