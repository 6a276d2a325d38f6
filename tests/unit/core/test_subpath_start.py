"""subPath through the pod path (worker -> sync -> container start) on the fake runtime: a link
out of the volume keeps the container from being created, with the kubelet's reason and a
message naming no host path; a good subPath reaches the runtime as its bind, which goes with
the pod. Real bind mounts in the test's folder: root only."""

from __future__ import annotations

import os

import pytest

from pykubelet.util import mounts
from tests.helpers import unmount_under
from tests.unit.core.harness import pod, until

pytestmark = [pytest.mark.looptime, pytest.mark.skipif(os.geteuid() != 0, reason="bind mounts need root")]


async def test_a_sub_path_link_out_of_the_volume_is_a_config_error_and_a_good_one_is_bound(node, tmp_path):
    host = tmp_path / "host"
    host.mkdir()
    volume = tmp_path / "root" / "pods" / "uid-web" / "volumes" / "kubernetes.io~empty-dir" / "v"
    volume.mkdir(parents=True)
    (volume / "x").symlink_to(host)  # what an init container of the pod could have done
    containers = [
        {"name": "app", "image": "busybox:1.36", "volumeMounts": [{"name": "v", "mountPath": "/h", "subPath": "x"}]},
        {"name": "ok", "image": "busybox:1.36", "env": [{"name": "DIR", "value": "data"}],
         "volumeMounts": [{"name": "v", "mountPath": "/d", "subPathExpr": "$(DIR)/logs"}]}]
    try:
        node.dispatcher.set_pods([pod(containers=containers, volumes=[{"name": "v", "emptyDir": {}}])])
        await until(lambda: node.container("app").get("state", {}).get("waiting", {}).get("reason")
                    == "CreateContainerConfigError" and node.container("ok").get("state", {}).get("running"),
                    what="app refused, ok running")
        assert node.container("app")["state"]["waiting"]["message"] == \
            'failed to prepare subPath for volumeMount "v" of container "app"'
        (created,) = [c for c in node.runtime.containers.values()]
        assert created.metadata.name == "ok"
        bind = tmp_path / "root" / "pods" / "uid-web" / "volume-subpaths" / "v" / "ok" / "0"
        assert [m.host_path for m in created.mounts if m.container_path == "/d"] == [str(bind)]
        assert mounts.is_mount_point(str(bind)) and os.path.samestat(os.stat(bind), os.stat(volume / "data" / "logs"))
        assert list(host.iterdir()) == []

        node.dispatcher.set_pods([])
        await until(lambda: not (tmp_path / "root" / "pods" / "uid-web").exists(), what="the pod's directory removed")
        assert not mounts.is_mount_point(str(bind)) and list(host.iterdir()) == []
    finally:
        unmount_under(str(tmp_path))
