"""A pod's inline CSI volume read from its spec, published (never staged) by a driver served
in-process with an in-memory API, and unpublished again."""

from __future__ import annotations

import base64
import hashlib
import os
from typing import Any

import pytest

from pykubelet.api.pod import Pod, parse_pod
from pykubelet.volumes.csi import vol_data
from pykubelet.volumes.csi.inline import CsiInlineSource, CsiInlineVolumes, InlineSourceError, parse_inline_source
from pykubelet.volumes.csi.node_client import Capability
from pykubelet.volumes.csi.operations import CsiNodeOperations
from pykubelet.volumes.csi.pv_setup import CsiSetupError
from tests.unit.csi_fakes import FakeApi, FakeNodeDriver, served_node_driver

DRIVER = "inline.csi.k8s.io"
CSIDRIVER = f"/apis/storage.k8s.io/v1/csidrivers/{DRIVER}"


def pod_with(csi: Any, **spec: Any) -> Pod:
    return parse_pod({"metadata": {"name": "web", "namespace": "shop", "uid": "u1"}, "spec": {
        "serviceAccountName": "app", "volumes": [{"name": "cache", "emptyDir": {}}, {"name": "scratch", "csi": csi}],
        "containers": [{"name": "c", "image": "busybox:1.36"}], **spec}}, where="test")


def source_of(pod: Pod) -> CsiInlineSource:
    return parse_inline_source(pod, 1, pod.volumes[1])


def test_an_inline_source_is_read_from_the_pods_volume():
    source = source_of(pod_with({"driver": DRIVER, "readOnly": True, "fsType": "ext4",
                                 "volumeAttributes": {"size": "1Gi"}, "nodePublishSecretRef": {"name": "creds"}}))
    assert source == CsiInlineSource("scratch", DRIVER, True, "ext4", {"size": "1Gi"}, "creds")


@pytest.mark.parametrize("csi, field, why", [
    ({}, "driver", "required"),
    ({"driver": 7}, "driver", "expected a string"),
    ({"driver": DRIVER, "readOnly": "yes"}, "readOnly", "expected a boolean"),
    ({"driver": DRIVER, "fsType": ["ext4"]}, "fsType", "expected a string"),
    ({"driver": DRIVER, "volumeAttributes": {"size": 1}}, "volumeAttributes", "expected an object of strings"),
    ({"driver": DRIVER, "nodePublishSecretRef": {}}, "nodePublishSecretRef.name", "required"),
    ({"driver": DRIVER, "nodePublishSecretRef": "creds"}, "nodePublishSecretRef.name", "required"),
])
def test_a_bad_field_is_named_with_the_pod_and_the_volume(csi, field, why):
    with pytest.raises(InlineSourceError) as failed:
        source_of(pod_with(csi))
    assert str(failed.value).startswith(f"pod shop/web: volume 'scratch': spec.volumes[1].csi.{field}: {why}")


@pytest.fixture
async def bed():
    # A driver that stages: an inline volume is published without it all the same.
    node = FakeNodeDriver(capabilities=(Capability.STAGE_UNSTAGE_VOLUME,))
    async with served_node_driver(node, DRIVER) as served:
        api = FakeApi()
        ops = CsiNodeOperations(os.path.join(served.root, "kubelet"), "node1", served.drivers)
        yield node, api, CsiInlineVolumes(ops, api.get), served.root


def ephemeral_driver(api: FakeApi, **spec: Any) -> None:
    api.put(CSIDRIVER, {"metadata": {"name": DRIVER}, "spec": {"volumeLifecycleModes": ["Ephemeral"], **spec}})


async def test_an_inline_volume_is_published_for_the_pod_only_with_its_id_attributes_and_secret(bed):
    node, api, volumes, root = bed
    ephemeral_driver(api, podInfoOnMount=True)
    api.put("/api/v1/namespaces/shop/secrets/creds", {"data": {"token": base64.b64encode(b"s3cret").decode()}})
    pod = pod_with({"driver": DRIVER, "readOnly": True, "fsType": "ext4", "volumeAttributes": {"size": "1Gi"},
                    "nodePublishSecretRef": {"name": "creds"}})

    path = await volumes.set_up(pod, source_of(pod))

    target = f"{root}/kubelet/pods/u1/volumes/kubernetes.io~csi/scratch/mount"
    assert path == target and os.path.isdir(target)
    assert node.calls("NodeStageVolume") == []
    [publish] = node.calls("NodePublishVolume")
    assert publish.volume_id == "csi-" + hashlib.sha256(b"u1scratch").hexdigest()
    assert (publish.target_path, publish.staging_target_path, publish.readonly) == (target, "", True)
    assert publish.volume_capability.mount.fs_type == "ext4"
    assert dict(publish.secrets) == {"token": "s3cret"}
    assert dict(publish.volume_context) == {
        "size": "1Gi", "csi.storage.k8s.io/pod.name": "web", "csi.storage.k8s.io/pod.namespace": "shop",
        "csi.storage.k8s.io/pod.uid": "u1", "csi.storage.k8s.io/serviceAccount.name": "app",
        "csi.storage.k8s.io/ephemeral": "true"}
    assert vol_data.load(os.path.dirname(target)) == vol_data.published_data(
        "scratch", DRIVER, publish.volume_id, "node1", "Ephemeral")

    await volumes.tear_down("u1", "scratch")
    [unpublish] = node.calls("NodeUnpublishVolume")
    assert (unpublish.volume_id, unpublish.target_path) == (publish.volume_id, target)
    assert os.listdir(f"{root}/kubelet/pods/u1/volumes/kubernetes.io~csi") == []


async def test_without_pod_info_on_mount_the_driver_gets_the_attributes_alone(bed):
    node, api, volumes, _ = bed
    ephemeral_driver(api)
    pod = pod_with({"driver": DRIVER, "volumeAttributes": {"size": "1Gi"}})
    await volumes.set_up(pod, source_of(pod))
    [publish] = node.calls("NodePublishVolume")
    assert dict(publish.volume_context) == {"size": "1Gi"} and not publish.readonly


@pytest.mark.parametrize("csidriver, why", [
    (None, 'volume mode "Ephemeral" not supported by driver inline.csi.k8s.io (no CSIDriver object)'),
    ({"volumeLifecycleModes": ["Persistent"]},
     'volume mode "Ephemeral" not supported by driver inline.csi.k8s.io (only supports ["Persistent"])'),
])
async def test_a_driver_that_does_not_offer_ephemeral_volumes_is_never_asked(bed, csidriver, why):
    node, api, volumes, _ = bed
    if csidriver is not None:
        api.put(CSIDRIVER, {"spec": csidriver})
    pod = pod_with({"driver": DRIVER})
    with pytest.raises(CsiSetupError) as failed:
        await volumes.set_up(pod, source_of(pod))
    assert (failed.value.operation, str(failed.value)) == (
        "MountVolume.SetUp", f"kubernetes.io/csi: mounter.SetupAt failed to check volume lifecycle mode: {why}")
    assert node.requests == []


async def test_a_driver_not_registered_on_the_node_is_named(bed):
    node, api, volumes, _ = bed
    pod = pod_with({"driver": "missing.csi.k8s.io"})
    with pytest.raises(CsiSetupError) as failed:
        await volumes.set_up(pod, source_of(pod))
    assert str(failed.value) == ("kubernetes.io/csi: mounter.SetUpAt failed to get CSI client: driver name "
                                 "missing.csi.k8s.io not found in the list of registered CSI drivers")


async def test_a_missing_secret_keeps_the_volume_unpublished(bed):
    node, api, volumes, _ = bed
    ephemeral_driver(api)
    pod = pod_with({"driver": DRIVER, "nodePublishSecretRef": {"name": "creds"}})
    with pytest.raises(CsiSetupError, match="fetching NodePublishSecretRef shop/creds failed"):
        await volumes.set_up(pod, source_of(pod))
    assert node.calls("NodePublishVolume") == []


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a directory's group needs root")
async def test_the_agent_applies_the_fs_group_of_a_volume_with_a_filesystem_type(bed):
    node, api, volumes, _ = bed
    ephemeral_driver(api)
    pod = pod_with({"driver": DRIVER, "fsType": "ext4"}, securityContext={"fsGroup": 3000})
    path = await volumes.set_up(pod, source_of(pod))
    assert os.stat(path).st_gid == 3000
    [publish] = node.calls("NodePublishVolume")
    assert publish.volume_capability.mount.volume_mount_group == ""  # the driver cannot take it
