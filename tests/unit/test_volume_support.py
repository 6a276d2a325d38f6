"""Which volumes the node can set up, from the spec alone: a volume a container needs that it
cannot process keeps the pod from starting, with the kubelet's words for why."""

from __future__ import annotations

from typing import Any

import pytest

from pykubelet.api.pod import parse_pod
from pykubelet.volumes.support import (Unprocessable, claim_name, unable_to_mount_message, unprocessable_volumes,
                                       used_volume_names)


def pod(volumes: list[dict[str, Any]], mounts: list[str], **container: Any):
    return parse_pod({"metadata": {"name": "db", "namespace": "shop", "uid": "u1"}, "spec": {
        "volumes": volumes,
        "containers": [{"name": "c", "image": "busybox:1.36",
                        "volumeMounts": [{"name": m, "mountPath": f"/{m}"} for m in mounts], **container}]}},
        where="test")


@pytest.mark.parametrize("volume, error", [
    ({"iscsi": {"targetPortal": "10.0.0.1:3260", "iqn": "iqn.2001-04.com.example:disk", "lun": 0}},
     'failed to get Plugin from volumeSpec for volume "data" err=no volume plugin matched: '
     "pykubelet cannot set up iscsi volumes"),
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


def test_claims_are_left_to_the_api_lookup_and_an_ephemeral_volume_names_the_pods_claim():
    # Whether a claim can be used takes its objects (claims.py); the spec alone never refuses it.
    p = pod([{"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}},
             {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}], ["data", "scratch"])
    assert unprocessable_volumes(p) == []
    assert [claim_name(p, v) for v in p.volumes] == ["data-db-0", "db-scratch"]


def test_a_volume_no_container_uses_does_not_block_as_with_the_kubelet():
    p = pod([{"name": "data", "persistentVolumeClaim": {"claimName": "x"}}, {"name": "tmp", "emptyDir": {}}], ["tmp"])
    assert unprocessable_volumes(p) == []


def test_every_kind_of_container_and_block_devices_count_as_using_a_volume():
    raw = {"metadata": {"name": "p", "uid": "u1"}, "spec": {
        "volumes": [{"name": n, "nfs": {"server": "x", "path": "/"}} for n in ("init", "dev", "debug", "idle")],
        "initContainers": [{"name": "i", "image": "x", "volumeMounts": [{"name": "init", "mountPath": "/i"}]}],
        "containers": [{"name": "c", "image": "x", "volumeDevices": [{"name": "dev", "devicePath": "/dev/xvda"}]}],
        "ephemeralContainers": [{"name": "e", "image": "x", "volumeMounts": [{"name": "debug", "mountPath": "/d"}]}]}}
    p = parse_pod(raw, where="test")
    assert used_volume_names(p) == {"init", "dev", "debug"}
    assert [u.volume for u in unprocessable_volumes(p)] == ["init", "dev", "debug"]


def test_the_pod_level_message_is_the_kubelets():
    p = pod([{"name": "tmp", "emptyDir": {}}, {"name": "data", "persistentVolumeClaim": {"claimName": "d"}},
             {"name": "blob", "nfs": {"server": "x", "path": "/"}}], ["tmp", "data", "blob"])
    not_bound = Unprocessable("data", "persistentVolumeClaim", "error processing PVC shop/d: PVC is not bound")
    found = [not_bound, *unprocessable_volumes(p)]
    assert unable_to_mount_message(found, sorted(used_volume_names(p))) == (
        "Unable to attach or mount volumes: unmounted volumes=[blob data tmp], unattached volumes=[], "
        "failed to process volumes=[blob data]: error processing PVC shop/d: PVC is not bound; "
        'failed to get Plugin from volumeSpec for volume "blob" err=no volume plugin '
        "matched: pykubelet cannot set up nfs volumes")
