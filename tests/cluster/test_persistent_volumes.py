"""On a real control plane: pods use PersistentVolumeClaims bound to hostPath and local PVs (each
pre-bound to its claim, so no provisioner is needed). What a pod writes through its claim is on
the host; a read-only claim cannot be written; a pod waits with the kubelet's FailedMount event
until its claim is bound; a local PV gets the pod's fsGroup, and one whose node affinity names
another node is never mounted here."""

from __future__ import annotations

import contextlib
import os
import pathlib
from typing import Any, Iterator

from tests.cluster.conftest import apply, kubectl
from tests.cluster.test_podspec_api import events, get_pod, output, pod, running
from tests.helpers import wait_for
from tests.runtime.conftest import NODE, sandboxes_of


def persistent_volume(name: str, namespace: str, claim: str, source: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "",
                     "persistentVolumeReclaimPolicy": "Retain",
                     "claimRef": {"namespace": namespace, "name": claim}, **source, **spec}}


def claim(namespace: str, name: str, volume: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": namespace},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": volume,
                     "resources": {"requests": {"storage": "1Gi"}}}}


def local(path: pathlib.Path, node: str) -> dict[str, Any]:
    return {"local": {"path": str(path)}, "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}}


def claim_pod(namespace: str, name: str, script: str, claim_name: str, read_only: bool = False,
              **spec: Any) -> dict[str, Any]:
    p = pod(namespace, name, script,
            volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": claim_name, "readOnly": read_only}}],
            mounts=[{"name": "data", "mountPath": "/data"}])
    p["spec"].update(spec)
    return p


def by_hand(p: dict[str, Any]) -> dict[str, Any]:
    """The pod bound to this node without the scheduler, which holds back a pod whose claim is
    unbound or whose PV is for another node."""
    del p["spec"]["nodeSelector"]
    p["spec"]["nodeName"] = NODE
    return p


@contextlib.contextmanager
def removed_afterwards(*pvs: str) -> Iterator[None]:
    """PVs are cluster-wide: deleted after the test (the namespace takes its claims and pods)."""
    try:
        yield
    finally:
        for pv in pvs:
            kubectl("delete", "pv", pv, "--wait=false", check=False)


def bound(namespace: str, name: str) -> bool:
    result = kubectl("get", "pvc", name, "-n", namespace, "-o", "jsonpath={.status.phase}", check=False)
    return result.stdout == "Bound"


async def test_a_host_path_pv_is_written_through_its_claim_and_a_read_only_claim_cannot_write(
        node_agent, namespace, tmp_path):
    host = tmp_path / "pv-host"
    pv = f"hostpath-{namespace}"
    with removed_afterwards(pv):
        apply([persistent_volume(pv, namespace, "data", {"hostPath": {"path": str(host), "type": "DirectoryOrCreate"}}),
               claim(namespace, "data", pv)])
        await wait_for(lambda: bound(namespace, "data"), 60, "the claim bound")
        apply(claim_pod(namespace, "writer", "echo written > /data/f; sleep 3600", "data"))
        await wait_for(lambda: (host / "f").exists(), 90, "the file on the host path", describe=node_agent.describe)
        assert (host / "f").read_text() == "written\n"

        apply(claim_pod(namespace, "reader", "cat /data/f; echo more > /data/g && echo WROTE || echo REFUSED; "
                                            "sleep 3600", "data", read_only=True))
        await wait_for(lambda: "REFUSED" in output(node_agent, namespace, "reader"), 90, "the read-only pod's attempt",
                       describe=node_agent.describe)
        assert "written" in output(node_agent, namespace, "reader") and not (host / "g").exists()


async def test_a_pod_waits_for_its_claim_to_be_bound_then_runs(node_agent, cri, namespace, tmp_path):
    host = tmp_path / "later"
    pv = f"later-{namespace}"
    with removed_afterwards(pv):
        apply(claim(namespace, "later", pv))  # names a PV that does not exist yet: Pending
        apply(by_hand(claim_pod(namespace, "waiter", "echo here > /data/f; sleep 3600", "later")))
        expected = f"error processing PVC {namespace}/later: PVC is not bound"
        await wait_for(lambda: any(expected in m for m in events(namespace, "FailedMount")), 90,
                       "the FailedMount event", describe=node_agent.describe)
        assert (get_pod(namespace, "waiter") or {})["status"]["phase"] == "Pending"
        assert not await sandboxes_of(cri, "waiter")

        apply(persistent_volume(pv, namespace, "later", {"hostPath": {"path": str(host), "type": "DirectoryOrCreate"}}))
        await wait_for(lambda: running(namespace, "waiter") and (host / "f").exists(), 180,
                       "the pod running once its claim is bound", describe=node_agent.describe)


async def test_a_local_pv_gets_the_fs_group_and_one_for_another_node_is_never_mounted(
        node_agent, cri, namespace, tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    here, elsewhere = f"local-{namespace}", f"elsewhere-{namespace}"
    with removed_afterwards(here, elsewhere):
        apply([persistent_volume(here, namespace, "disk", local(disk, NODE)), claim(namespace, "disk", here),
               persistent_volume(elsewhere, namespace, "far", local(disk, "another-node")),
               claim(namespace, "far", elsewhere)])
        await wait_for(lambda: bound(namespace, "disk") and bound(namespace, "far"), 60, "the claims bound")
        apply(claim_pod(namespace, "owner", "echo mine > /data/f; sleep 3600", "disk",
                        securityContext={"runAsUser": 1000, "fsGroup": 2000, "fsGroupChangePolicy": "OnRootMismatch"}))
        await wait_for(lambda: (disk / "f").exists(), 90, "the file on the local disk", describe=node_agent.describe)
        assert (os.stat(disk).st_gid, os.stat(disk / "f").st_gid, os.stat(disk / "f").st_uid) == (2000, 2000, 1000)

        # The scheduler would not put it here: bound by hand, as a mis-scheduled pod would be.
        apply(by_hand(claim_pod(namespace, "stray", "echo nope > /data/g; sleep 3600", "far")))
        expected = f'MountVolume.NodeAffinity check failed for volume "{elsewhere}" : no matching NodeSelectorTerms'
        await wait_for(lambda: expected in events(namespace, "FailedMount"), 90, "the FailedMount event",
                       describe=node_agent.describe)
        assert not await sandboxes_of(cri, "stray") and not (disk / "g").exists()
