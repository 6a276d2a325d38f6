"""A pod's CSI PersistentVolume set up and torn down against a driver served in-process and an
in-memory API: attach wait, secrets, pod information, staging shared between pods."""

from __future__ import annotations

import base64
import os

import pytest

from pykubelet.api.pod import Pod
from pykubelet.volumes.claim_model import parse_volume
from pykubelet.volumes.csi import paths
from pykubelet.volumes.csi.node_client import Capability
from pykubelet.volumes.csi.operations import CsiNodeOperations
from pykubelet.volumes.csi.pv_setup import CsiPersistentVolumes, CsiSetupError
from tests.unit.csi_fakes import FakeApi, FakeNodeDriver, served_node_driver

DRIVER = "hostpath.csi.k8s.io"
CSIDRIVER = f"/apis/storage.k8s.io/v1/csidrivers/{DRIVER}"


def pv(**csi_fields) -> object:
    source = {"driver": DRIVER, "volumeHandle": "vol-1", "fsType": "ext4", **csi_fields}
    return parse_volume({"metadata": {"name": "pvc-1"}, "spec": {
        "accessModes": ["ReadWriteOnce"], "claimRef": {"uid": "c"}, "csi": source}})


def pod(uid: str) -> Pod:
    return Pod(name=f"web-{uid}", namespace="default", uid=uid, containers=(),
               raw={"spec": {"serviceAccountName": "app"}})


@pytest.fixture
async def bed():
    node = FakeNodeDriver(capabilities=(Capability.STAGE_UNSTAGE_VOLUME,))
    async with served_node_driver(node, DRIVER) as served:
        api = FakeApi()
        ops = CsiNodeOperations(os.path.join(served.root, "kubelet"), "node1", served.drivers)
        yield node, api, CsiPersistentVolumes(ops, api.get), served.root


def attached(api: FakeApi, metadata: dict[str, str]) -> None:
    name = paths.attachment_name("vol-1", DRIVER, "node1")
    api.put(f"/apis/storage.k8s.io/v1/volumeattachments/{name}",
            {"metadata": {"name": name}, "status": {"attached": True, "attachmentMetadata": metadata}})


async def test_an_attached_volume_is_staged_and_published_with_its_secrets(bed):
    node, api, volumes, root = bed
    attached(api, {"devicePath": "/dev/loop3"})
    api.put("/api/v1/namespaces/ns/secrets/stage", {"data": {"k": base64.b64encode(b"stage").decode()}})
    api.put("/api/v1/namespaces/ns/secrets/pub", {"data": {"k": base64.b64encode(b"pub").decode()}})

    path = await volumes.set_up(pod("u1"), pv(nodeStageSecretRef={"namespace": "ns", "name": "stage"},
                                              nodePublishSecretRef={"namespace": "ns", "name": "pub"},
                                              volumeAttributes={"a": "1"}), read_only=True)

    assert path == f"{root}/kubelet/pods/u1/volumes/kubernetes.io~csi/pvc-1/mount" and os.path.isdir(path)
    [stage] = node.calls("NodeStageVolume")
    assert dict(stage.secrets) == {"k": "stage"} and dict(stage.publish_context) == {"devicePath": "/dev/loop3"}
    [publish] = node.calls("NodePublishVolume")
    assert dict(publish.secrets) == {"k": "pub"} and publish.readonly
    assert dict(publish.volume_context) == {"a": "1"}  # no CSIDriver: no pod information
    assert publish.staging_target_path == stage.staging_target_path


async def test_a_pod_info_driver_without_attach_is_told_who_the_pod_is(bed):
    node, api, volumes, _ = bed
    api.put(CSIDRIVER, {"metadata": {"name": DRIVER}, "spec": {"attachRequired": False, "podInfoOnMount": True}})
    await volumes.set_up(pod("u1"), pv(), read_only=False)
    [publish] = node.calls("NodePublishVolume")
    assert dict(publish.volume_context) == {
        "csi.storage.k8s.io/pod.name": "web-u1", "csi.storage.k8s.io/pod.namespace": "default",
        "csi.storage.k8s.io/pod.uid": "u1", "csi.storage.k8s.io/serviceAccount.name": "app",
        "csi.storage.k8s.io/ephemeral": "false"}
    assert dict(publish.publish_context) == {}


async def test_a_volume_not_attached_yet_waits_for_its_volume_attachment(bed):
    node, api, volumes, _ = bed
    name = paths.attachment_name("vol-1", DRIVER, "node1")
    api.put(f"/apis/storage.k8s.io/v1/volumeattachments/{name}", {"metadata": {"name": name}, "status": {"attached": False}})
    with pytest.raises(CsiSetupError) as failed:
        await volumes.set_up(pod("u1"), pv(), read_only=False)
    assert failed.value.operation == "MountVolume.WaitForAttach"
    assert str(failed.value) == f"volume vol-1 is not attached for volume attachment {name}"
    assert node.calls("NodeStageVolume") == []


async def test_an_unregistered_driver_fails_the_mount_in_the_kubelets_words(bed):
    _, api, volumes, _ = bed
    api.put("/apis/storage.k8s.io/v1/csidrivers/other.csi", {"spec": {"attachRequired": False}})
    with pytest.raises(CsiSetupError) as failed:
        await volumes.set_up(pod("u1"), pv(driver="other.csi"), read_only=False)
    assert failed.value.operation == "MountVolume.MountDevice"
    assert str(failed.value).endswith("driver name other.csi not found in the list of registered CSI drivers")


async def test_a_driver_only_for_ephemeral_volumes_refuses_a_pv(bed):
    node, api, volumes, _ = bed
    api.put(CSIDRIVER, {"spec": {"attachRequired": False, "volumeLifecycleModes": ["Ephemeral"]}})
    with pytest.raises(CsiSetupError, match='volume mode "Persistent" not supported by driver'):
        await volumes.set_up(pod("u1"), pv(), read_only=False)
    assert node.requests == []


async def test_two_pods_share_one_staging_which_goes_with_the_last(bed):
    node, api, volumes, root = bed
    api.put(CSIDRIVER, {"spec": {"attachRequired": False}})
    await volumes.set_up(pod("u1"), pv(), read_only=False)
    await volumes.set_up(pod("u2"), pv(), read_only=False)
    assert len(node.calls("NodeStageVolume")) == 1 and len(node.calls("NodePublishVolume")) == 2

    await volumes.tear_down("u1", "pvc-1")
    assert node.calls("NodeUnstageVolume") == []
    await volumes.tear_down("u2", "pvc-1")
    assert len(node.calls("NodeUnpublishVolume")) == 2 and len(node.calls("NodeUnstageVolume")) == 1
    assert os.listdir(f"{root}/kubelet/plugins/kubernetes.io/csi/{DRIVER}") == []
