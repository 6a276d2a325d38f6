"""A PV's spec.csi, the secrets it names and the driver's CSIDriver, as the node reads them."""

from __future__ import annotations

import base64

import pytest

from pykubelet.volumes.csi.csidriver import CsiDriverError, fetch_driver_policy
from pykubelet.volumes.csi.source import (CsiSourceError, SecretFetchError, SecretRef, fetch_secret,
                                          parse_csi_source, pod_info_context)
from tests.unit.csi_fakes import FakeApi


def test_a_csi_source_is_read_with_its_secret_references():
    source = parse_csi_source("pv1", {"driver": "d.csi", "volumeHandle": "h", "fsType": "xfs",
                                      "volumeAttributes": {"k": "v"},
                                      "nodeStageSecretRef": {"namespace": "ns", "name": "stage"},
                                      "nodePublishSecretRef": {"namespace": "ns", "name": "pub"}})
    assert (source.driver, source.volume_handle, source.fs_type) == ("d.csi", "h", "xfs")
    assert source.volume_attributes == {"k": "v"}
    assert source.node_stage_secret_ref == SecretRef("ns", "stage")
    assert source.node_publish_secret_ref == SecretRef("ns", "pub")


@pytest.mark.parametrize("source, message", [
    ({"volumeHandle": "h"}, "PersistentVolume pv1: spec.csi.driver: required"),
    ({"driver": "d", "volumeHandle": 7}, "PersistentVolume pv1: spec.csi.volumeHandle: expected a string"),
    ({"driver": "d", "volumeHandle": "h", "volumeAttributes": {"k": 1}},
     "PersistentVolume pv1: spec.csi.volumeAttributes: expected an object of strings"),
    ({"driver": "d", "volumeHandle": "h", "nodePublishSecretRef": {"namespace": "ns"}},
     "PersistentVolume pv1: spec.csi.nodePublishSecretRef.name: required"),
])
def test_a_malformed_csi_source_names_the_pv_and_the_field(source, message):
    with pytest.raises(CsiSourceError) as failed:
        parse_csi_source("pv1", source)
    assert str(failed.value) == message


async def test_a_secret_is_handed_over_decoded_and_a_missing_one_in_the_kubelets_words():
    api = FakeApi()
    api.put("/api/v1/namespaces/ns/secrets/s", {"metadata": {"name": "s"},
                                                "data": {"password": base64.b64encode(b"hunter2").decode()}})
    assert await fetch_secret(api.get, SecretRef("ns", "s"), "NodePublishSecretRef") == {"password": "hunter2"}
    with pytest.raises(SecretFetchError) as failed:
        await fetch_secret(api.get, SecretRef("ns", "gone"), "NodeStageSecretRef")
    assert str(failed.value).startswith("fetching NodeStageSecretRef ns/gone failed: kubernetes.io/csi: "
                                        "failed to find the secret gone in the namespace ns with error: ")


def test_pod_information_uses_the_kubelets_keys():
    assert pod_info_context("web", "default", "uid-1", "sa", ephemeral=False) == {
        "csi.storage.k8s.io/pod.name": "web", "csi.storage.k8s.io/pod.namespace": "default",
        "csi.storage.k8s.io/pod.uid": "uid-1", "csi.storage.k8s.io/serviceAccount.name": "sa",
        "csi.storage.k8s.io/ephemeral": "false"}


async def test_a_driver_without_csidriver_gets_the_kubelets_defaults():
    api = FakeApi()
    policy = await fetch_driver_policy(api.get, "d.csi")
    assert not policy.exists and policy.attach_required and not policy.pod_info_on_mount
    assert policy.lifecycle_modes == ("Persistent",)
    api.put("/apis/storage.k8s.io/v1/csidrivers/d.csi", {"metadata": {"name": "d.csi"}, "spec": {
        "attachRequired": False, "podInfoOnMount": True, "volumeLifecycleModes": ["Persistent", "Ephemeral"]}})
    policy = await fetch_driver_policy(api.get, "d.csi")
    assert policy.exists and not policy.attach_required and policy.pod_info_on_mount
    assert policy.lifecycle_modes == ("Persistent", "Ephemeral")
    api.put("/apis/storage.k8s.io/v1/csidrivers/d.csi", {"spec": {"attachRequired": "no"}})
    with pytest.raises(CsiDriverError, match="CSIDriver d.csi: spec.attachRequired: expected a boolean"):
        await fetch_driver_policy(api.get, "d.csi")
