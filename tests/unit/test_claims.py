"""A pod's claim volume → its claim → its bound PV, with the kubelet's words for each reason the
pod has to wait; the PV's node affinity against the node's labels; bad objects named by field."""

from __future__ import annotations

from typing import Any

import pytest

from pykubelet.api.pod import parse_pod
from pykubelet.volumes.claim_model import ClaimObjectError, parse_claim, parse_volume
from pykubelet.volumes.claim_volumes import ClaimVolumes
from pykubelet.volumes.claims import ClaimError, resolve
from pykubelet.volumes.node_affinity import affinity_error
from tests.fakes.kube import FakeKube

CLAIMS = "/api/v1/namespaces/shop/persistentvolumeclaims"


def pod(volume: dict[str, Any], uid: str = "pod-uid"):
    return parse_pod({"metadata": {"name": "db", "namespace": "shop", "uid": uid}, "spec": {
        "volumes": [{"name": "data", **volume}],
        "containers": [{"name": "c", "image": "x", "volumeMounts": [{"name": "data", "mountPath": "/d"}]}]}},
        where="test")


def claim(name: str = "data-db", **changes: Any) -> dict[str, Any]:
    obj = {"metadata": {"name": name, "namespace": "shop", "uid": "claim-uid"},
           "spec": {"volumeName": "pv1"}, "status": {"phase": "Bound"}}
    for key, value in changes.items():
        obj[key] = {**obj.get(key, {}), **value}
    return obj


def pv(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "pv1"}, "spec": {"claimRef": {"uid": "claim-uid"}, "accessModes": ["ReadWriteOnce"],
                                                 "hostPath": {"path": "/srv/data"}, **spec}}


def api(*objects: tuple[str, dict[str, Any]]) -> FakeKube:
    kube = FakeKube()
    kube.objects.update(objects)
    return kube


async def resolved(kube: FakeKube, volume: dict[str, Any] | None = None, uid: str = "pod-uid"):
    volume = volume or {"persistentVolumeClaim": {"claimName": "data-db"}}
    p = pod(volume, uid)
    return await resolve(p, p.volumes[0], kube.get, mounted=True, as_device=False)


async def test_a_bound_claim_resolves_to_its_pv_with_the_pods_read_only():
    kube = api((f"{CLAIMS}/data-db", claim()), ("/api/v1/persistentvolumes/pv1", pv()))
    found = await resolved(kube, {"persistentVolumeClaim": {"claimName": "data-db", "readOnly": True}})
    assert (found.volume, found.pv.name, found.pv.source_kind, found.pv.source["path"], found.read_only) == \
        ("data", "pv1", "hostPath", "/srv/data", True)
    assert not (await resolved(kube)).read_only


@pytest.mark.parametrize("objects, error", [
    ((), 'error processing PVC shop/data-db: failed to fetch PVC from API server: not found'),
    (((f"{CLAIMS}/data-db", claim(status={"phase": "Pending"})),), "error processing PVC shop/data-db: PVC is not bound"),
    (((f"{CLAIMS}/data-db", claim(spec={"volumeName": ""})),),
     "error processing PVC shop/data-db: PVC has empty pvc.Spec.VolumeName"),
    (((f"{CLAIMS}/data-db", claim(metadata={"deletionTimestamp": "2026-01-01T00:00:00Z"})),),
     "error processing PVC shop/data-db: PVC is being deleted"),
    (((f"{CLAIMS}/data-db", claim()),),
     "error processing PVC shop/data-db: failed to fetch PV pv1 from API server: not found"),
    (((f"{CLAIMS}/data-db", claim()), ("/api/v1/persistentvolumes/pv1", pv(claimRef=None))),
     "error processing PVC shop/data-db: found PV object pv1 but it has a nil pv.Spec.ClaimRef indicating it is "
     "not yet bound to the claim"),
    (((f"{CLAIMS}/data-db", claim()), ("/api/v1/persistentvolumes/pv1", pv(claimRef={"uid": "other"}))),
     "error processing PVC shop/data-db: found PV object pv1 but its pv.Spec.ClaimRef.UID other does not point to "
     "claim.UID claim-uid"),
    (((f"{CLAIMS}/data-db", claim()), ("/api/v1/persistentvolumes/pv1", pv(volumeMode="Block"))),
     "volume data has volumeMode Block, but is specified in volumeMounts"),
    (((f"{CLAIMS}/data-db", claim()), ("/api/v1/persistentvolumes/pv1", pv(hostPath=None, nfs={"path": "/x"}))),
     'failed to get Plugin from volumeSpec for volume "pv1" err=no volume plugin matched: '
     "pykubelet cannot set up nfs volumes"),
    (((f"{CLAIMS}/data-db", claim(spec={"volumeName": 7})),),
     "error processing PVC shop/data-db: PersistentVolumeClaim shop/data-db: spec.volumeName: expected a string"),
])
async def test_a_claim_the_pod_cannot_use_yet_is_refused_with_the_kubelets_words(objects, error):
    with pytest.raises(ClaimError) as e:
        await resolved(api(*objects))
    assert str(e.value) == error


async def test_a_block_pv_is_a_device_only_from_a_csi_driver():
    def block_pv(**source: Any) -> dict[str, Any]:
        return pv(hostPath=None, volumeMode="Block", **source)
    p = pod({"persistentVolumeClaim": {"claimName": "data-db"}})
    csi = api((f"{CLAIMS}/data-db", claim()),
              ("/api/v1/persistentvolumes/pv1", block_pv(csi={"driver": "d.csi", "volumeHandle": "h"})))
    found = await resolve(p, p.volumes[0], csi.get, mounted=False, as_device=True)
    assert (found.pv.source_kind, found.pv.volume_mode) == ("csi", "Block")
    local = api((f"{CLAIMS}/data-db", claim()), ("/api/v1/persistentvolumes/pv1", block_pv(local={"path": "/dev/sdb"})))
    with pytest.raises(ClaimError, match="pykubelet cannot set up local block volumes"):
        await resolve(p, p.volumes[0], local.get, mounted=False, as_device=True)


async def test_a_claim_being_deleted_but_still_protected_keeps_its_pod():
    protected = claim(metadata={"deletionTimestamp": "2026-01-01T00:00:00Z",
                                "finalizers": ["kubernetes.io/pvc-protection"]})
    kube = api((f"{CLAIMS}/data-db", protected), ("/api/v1/persistentvolumes/pv1", pv()))
    assert (await resolved(kube)).pv.name == "pv1"


async def test_a_generic_ephemeral_volume_uses_the_claim_its_pod_controls_and_no_look_alike():
    owned = claim("db-data", metadata={"ownerReferences": [{"kind": "Pod", "name": "db", "uid": "pod-uid",
                                                            "controller": True}]})
    kube = api((f"{CLAIMS}/db-data", owned), ("/api/v1/persistentvolumes/pv1", pv()))
    ephemeral = {"ephemeral": {"volumeClaimTemplate": {"spec": {}}}}
    assert (await resolved(kube, ephemeral)).claim.name == "db-data"
    with pytest.raises(ClaimError) as e:
        await resolved(kube, ephemeral, uid="another-pod-of-the-same-name")
    assert str(e.value) == "PVC shop/db-data was not created for pod shop/db (pod is not owner)"


def test_a_malformed_pv_is_named_with_its_field():
    with pytest.raises(ClaimObjectError) as e:
        parse_volume({"metadata": {"name": "pv1"}, "spec": {"local": {"path": "/x"}, "nodeAffinity": {"required": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "In", "values": "a"}]}]}}}})
    assert str(e.value) == ("PersistentVolume pv1: spec.nodeAffinity.required.nodeSelectorTerms[0]."
                            "matchExpressions[0].values: expected a list of strings")
    with pytest.raises(ClaimObjectError, match=r"metadata.ownerReferences\[0\].controller: expected a boolean"):
        parse_claim(claim(metadata={"ownerReferences": [{"uid": "u", "controller": "yes"}]}))


def affinity(*terms: dict[str, Any]):
    return parse_volume(pv(nodeAffinity={"required": {"nodeSelectorTerms": list(terms)}}))


@pytest.mark.parametrize("terms, expected", [
    ([{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-a"]}]}], None),
    ([{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-b"]}]}],
     "no matching NodeSelectorTerms"),
    # Terms are ORed, the expressions of one ANDed.
    ([{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-b"]}]},
      {"matchExpressions": [{"key": "disk", "operator": "Exists"},
                            {"key": "zone", "operator": "NotIn", "values": ["z2"]}]}], None),
    ([{"matchExpressions": [{"key": "disk", "operator": "Exists"}, {"key": "zone", "operator": "In",
                                                                     "values": ["z2"]}]}],
     "no matching NodeSelectorTerms"),
    ([{"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["3"]}]}], None),
    ([{"matchExpressions": [{"key": "gen", "operator": "Lt", "values": ["3"]}]}], "no matching NodeSelectorTerms"),
    ([{"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}], None),
    # The kubelet checks the labels only: a term on the node's name never matches.
    ([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}],
     "no matching NodeSelectorTerms"),
    ([{}], "no matching NodeSelectorTerms"),
    ([{"matchExpressions": [{"key": "disk", "operator": "Near"}]}], "'Near' is not a valid node selector operator"),
])
def test_a_pvs_node_affinity_is_checked_against_the_nodes_labels(terms, expected):
    labels = {"kubernetes.io/hostname": "node-a", "disk": "ssd", "zone": "z1", "gen": "5"}
    assert affinity_error(affinity(*terms), labels) == expected


def test_a_pv_without_required_affinity_mounts_anywhere():
    assert affinity_error(parse_volume(pv()), {}) is None
    assert affinity_error(parse_volume(pv(nodeAffinity={})), {}) is None


async def test_a_node_whose_labels_cannot_be_read_mounts_no_pv_with_node_affinity(tmp_path):
    kube = api((f"{CLAIMS}/data-db", claim()), ("/api/v1/persistentvolumes/pv1", pv(
        hostPath=None, local={"path": str(tmp_path)}, nodeAffinity={"required": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["node1"]}]}]}})))
    volumes = ClaimVolumes(str(tmp_path / "root"), "node1", kube.get)  # no Node object in the API
    p = pod({"persistentVolumeClaim": {"claimName": "data-db"}})
    resolved, unprocessable = await volumes.resolve(p)
    assert unprocessable == []
    (failure,) = await volumes.setup(p, resolved)
    assert failure.message == 'MountVolume.NodeAffinity check failed for volume "pv1" : error retrieving node: not found'
    assert volumes.mounts_of(p.uid) == {} and not (tmp_path / "root").exists()
