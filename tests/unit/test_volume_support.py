"""Which volumes the node can set up, from the spec alone: a volume a container needs that it
cannot process keeps the pod from starting, with the kubelet's words for why."""

from __future__ import annotations

from typing import Any

import pytest

from pykubelet.api.pod import parse_pod
from pykubelet.volumes.support import unable_to_mount_message, unprocessable_volumes, used_volume_names


def pod(volumes: list[dict[str, Any]], mounts: list[str], **container: Any):
    return parse_pod({"metadata": {"name": "db", "namespace": "shop", "uid": "u1"}, "spec": {
        "volumes": volumes,
        "containers": [{"name": "c", "image": "busybox:1.36",
                        "volumeMounts": [{"name": m, "mountPath": f"/{m}"} for m in mounts], **container}]}},
        where="test")


@pytest.mark.parametrize("volume, error", [
    ({"persistentVolumeClaim": {"claimName": "data-db-0"}},
     "error processing PVC shop/data-db-0: PersistentVolumeClaims are not supported by pykubelet yet"),
    # A generic ephemeral volume is the claim the controller makes for the pod: <pod>-<volume>.
    ({"ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
     "error processing PVC shop/db-data: PersistentVolumeClaims are not supported by pykubelet yet"),
    ({"csi": {"driver": "hostpath.csi.k8s.io"}},
     'failed to get Plugin from volumeSpec for volume "data" err=no volume plugin matched: '
     "pykubelet cannot set up csi volumes"),
    ({"nfs": {"server": "10.0.0.1", "path": "/export"}},
     'failed to get Plugin from volumeSpec for volume "data" err=no volume plugin matched: '
     "pykubelet cannot set up nfs volumes"),
    ({"fancyNewType": {}},
     'failed to get Plugin from volumeSpec for volume "data" err=no volume plugin matched: '
     "pykubelet cannot set up fancyNewType volumes"),
])
def test_a_mounted_volume_the_node_cannot_set_up_is_named_with_the_kubelets_error(volume, error):
    (found,) = unprocessable_volumes(pod([{"name": "data", **volume}], ["data"]))
    assert (found.volume, found.error) == ("data", error)


def test_the_volume_types_the_node_sets_up_never_block():
    volumes = [{"name": "a", "emptyDir": {}}, {"name": "b", "hostPath": {"path": "/x"}},
               {"name": "c", "configMap": {"name": "x"}}, {"name": "d", "secret": {"secretName": "x"}},
               {"name": "e", "downwardAPI": {}}, {"name": "f", "projected": {"sources": []}},
               {"name": "g"}]  # no source: the API's default, an emptyDir
    assert unprocessable_volumes(pod(volumes, list("abcdefg"))) == []


def test_a_volume_no_container_uses_does_not_block_as_with_the_kubelet():
    p = pod([{"name": "data", "persistentVolumeClaim": {"claimName": "x"}}, {"name": "tmp", "emptyDir": {}}], ["tmp"])
    assert unprocessable_volumes(p) == []


def test_every_kind_of_container_and_block_devices_count_as_using_a_volume():
    raw = {"metadata": {"name": "p", "uid": "u1"}, "spec": {
        "volumes": [{"name": n, "persistentVolumeClaim": {"claimName": n}} for n in ("init", "dev", "debug", "idle")],
        "initContainers": [{"name": "i", "image": "x", "volumeMounts": [{"name": "init", "mountPath": "/i"}]}],
        "containers": [{"name": "c", "image": "x", "volumeDevices": [{"name": "dev", "devicePath": "/dev/xvda"}]}],
        "ephemeralContainers": [{"name": "e", "image": "x", "volumeMounts": [{"name": "debug", "mountPath": "/d"}]}]}}
    p = parse_pod(raw, where="test")
    assert used_volume_names(p) == {"init", "dev", "debug"}
    assert [u.volume for u in unprocessable_volumes(p)] == ["init", "dev", "debug"]


def test_the_pod_level_message_is_the_kubelets():
    p = pod([{"name": "tmp", "emptyDir": {}}, {"name": "data", "persistentVolumeClaim": {"claimName": "d"}},
             {"name": "blob", "csi": {"driver": "x"}}], ["tmp", "data", "blob"])
    found = unprocessable_volumes(p)
    assert unable_to_mount_message(found, sorted(used_volume_names(p))) == (
        "Unable to attach or mount volumes: unmounted volumes=[blob data tmp], unattached volumes=[], "
        "failed to process volumes=[blob data]: error processing PVC shop/d: PersistentVolumeClaims are not "
        'supported by pykubelet yet; failed to get Plugin from volumeSpec for volume "blob" err=no volume plugin '
        "matched: pykubelet cannot set up csi volumes")
