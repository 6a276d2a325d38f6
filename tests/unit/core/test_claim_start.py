"""Claim volumes through the pod path (worker -> sync -> container start) on the fake runtime and
an in-memory apiserver: a pod waits, with the kubelet's event, until its claim is bound, then
mounts the PV; a local PV is bind-mounted for the pod only on the nodes its affinity names,
gets the pod's fsGroup, and a ReadWriteOncePod one serves one pod at a time. Real bind mounts
in the test's folder: root only."""

from __future__ import annotations

import os
from typing import Any

import pytest

from pykubelet.util import mounts
from tests.fakes.kube import FakeKube
from tests.helpers import unmount_under
from tests.unit.core.harness import NODE, pod, until

pytestmark = pytest.mark.looptime
CLAIMS = "/api/v1/namespaces/default/persistentvolumeclaims"


def record_events(node) -> list[tuple[str, str, str]]:
    events: list[tuple[str, str, str]] = []
    node.deps.recorder.record = lambda ref, kind, reason, message: events.append((kind, reason, message))
    return events


def failed_mounts(events: list[tuple[str, str, str]]) -> list[str]:
    return [message for kind, reason, message in events if (kind, reason) == ("Warning", "FailedMount")]


def with_api(node) -> FakeKube:
    kube = FakeKube()
    kube.objects[f"/api/v1/nodes/{NODE}"] = {"metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}}}
    node.deps.syncer.api_volumes.claims.get = kube.get
    return kube


def bind(kube: FakeKube, claim: str, pv: str, source: dict[str, Any], **spec: Any) -> None:
    kube.objects[f"{CLAIMS}/{claim}"] = {"metadata": {"name": claim, "namespace": "default", "uid": f"uid-{claim}"},
                                         "spec": {"volumeName": pv}, "status": {"phase": "Bound"}}
    kube.objects[f"/api/v1/persistentvolumes/{pv}"] = {
        "metadata": {"name": pv}, "spec": {"claimRef": {"uid": f"uid-{claim}"}, **source, **spec}}


def app(*mounts: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"name": "app", "image": "busybox:1.36", "volumeMounts": list(mounts)}]


def created_mounts(node, uid: str = "uid-web") -> dict[str, Any]:
    sandboxes = {s.id for s in node.runtime.sandboxes.values() if s.metadata.uid == uid}
    return {m.container_path: m for c in node.runtime.containers.values() if node.runtime.container_sandbox[c.id] in sandboxes
            for m in c.mounts}


async def test_a_pod_waits_for_its_claim_to_be_bound_then_mounts_the_host_path_pv(node, tmp_path):
    events = record_events(node)
    kube = with_api(node)
    data = tmp_path / "pv-data"
    spec = {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data", "readOnly": True}}]}
    node.dispatcher.set_pods([pod(containers=app({"name": "data", "mountPath": "/data"},
                                                 {"name": "data", "mountPath": "/logs", "subPath": "logs"}), **spec)])
    await until(lambda: failed_mounts(events), what="a FailedMount event")
    assert failed_mounts(events)[0] == (
        "Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[], failed to process "
        "volumes=[data]: error processing PVC default/data: failed to fetch PVC from API server: not found")
    assert not node.runtime.sandboxes
    kube.objects[f"{CLAIMS}/data"] = {"metadata": {"name": "data", "namespace": "default", "uid": "uid-data"},
                                      "spec": {}, "status": {"phase": "Pending"}}
    await until(lambda: "PVC is not bound" in failed_mounts(events)[-1], what="the claim not bound")
    assert node.container()["state"]["waiting"]["reason"] == "ContainerCreating" and not node.runtime.sandboxes

    bind(kube, "data", "pv1", {"hostPath": {"path": str(data), "type": "DirectoryOrCreate"}})
    try:
        await until(lambda: node.container().get("state", {}).get("running"), what="the container running")
        created = created_mounts(node)
        assert (created["/data"].host_path, created["/data"].readonly) == (str(data), True)
        assert created["/logs"].readonly and (data / "logs").is_dir()  # subPath inside the PV
    finally:
        unmount_under(str(tmp_path))


def local_pv(path: str, host: str = NODE, **spec: Any) -> dict[str, Any]:
    return {"local": {"path": path}, "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": [host]}]}]}}, **spec}


@pytest.mark.skipif(os.geteuid() != 0, reason="bind mounts need root")
async def test_a_local_pv_for_another_node_is_never_mounted(node, tmp_path):
    events = record_events(node)
    kube = with_api(node)
    disk = tmp_path / "disk"
    disk.mkdir()
    bind(kube, "data", "local-pv", local_pv(str(disk), host="node2"))
    spec = {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]}
    node.dispatcher.set_pods([pod(containers=app({"name": "data", "mountPath": "/data"}), **spec)])
    await until(lambda: len(failed_mounts(events)) >= 2, what="tried twice")
    assert failed_mounts(events)[0] == \
        'MountVolume.NodeAffinity check failed for volume "local-pv" : no matching NodeSelectorTerms'
    assert not node.runtime.sandboxes
    assert not (tmp_path / "root" / "pods" / "uid-web" / "volumes" / "kubernetes.io~local-volume").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="bind mounts need root")
async def test_a_local_pv_is_bound_for_its_pod_with_the_fs_group_and_serves_one_read_write_once_pod(node, tmp_path):
    events = record_events(node)
    kube = with_api(node)
    disk = tmp_path / "disk"
    disk.mkdir()
    (disk / "old").write_text("data")
    bind(kube, "data", "local-pv", local_pv(str(disk), accessModes=["ReadWriteOncePod"]))
    spec = {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
            "securityContext": {"fsGroup": 2000, "fsGroupChangePolicy": "OnRootMismatch"}}
    first = pod(containers=app({"name": "data", "mountPath": "/data"}), **spec)
    second = pod("other", "uid-other", containers=app({"name": "data", "mountPath": "/data"}), **spec)
    target = tmp_path / "root" / "pods" / "uid-web" / "volumes" / "kubernetes.io~local-volume" / "local-pv"
    try:
        node.dispatcher.set_pods([first])
        await until(lambda: node.container().get("state", {}).get("running"), what="the first pod running")
        assert created_mounts(node)["/data"].host_path == str(target) and mounts.is_mount_point(str(target))
        assert (os.stat(disk).st_gid, os.stat(disk / "old").st_gid) == (2000, 2000)

        node.dispatcher.set_pods([first, second])
        await until(lambda: failed_mounts(events), what="the second pod refused")
        assert failed_mounts(events)[0] == ('MountVolume.SetUp failed for volume "local-pv" : volume uses the '
                                            'ReadWriteOncePod access mode and is already in use by another pod')
        assert not created_mounts(node, "uid-other")

        node.dispatcher.set_pods([second])
        await until(lambda: node.container(uid="uid-other").get("state", {}).get("running"),
                    what="the second pod running once the first is gone")
        assert not mounts.is_mount_point(str(target)) and not target.exists()
        assert (disk / "old").read_text() == "data"  # the pod's directory went, never the PV's data
    finally:
        unmount_under(str(tmp_path))


async def test_a_csi_pv_of_a_driver_not_registered_keeps_the_pod_waiting_with_the_kubelets_event(node, tmp_path):
    events = record_events(node)
    kube = with_api(node)
    kube.objects["/apis/storage.k8s.io/v1/csidrivers/hostpath.csi.k8s.io"] = {
        "metadata": {"name": "hostpath.csi.k8s.io"}, "spec": {"attachRequired": False}}
    bind(kube, "data", "pvc-1", {"csi": {"driver": "hostpath.csi.k8s.io", "volumeHandle": "vol-1"}})
    spec = {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]}
    node.dispatcher.set_pods([pod(containers=app({"name": "data", "mountPath": "/data"}), **spec)])
    await until(lambda: len(failed_mounts(events)) >= 2, what="tried twice")
    assert failed_mounts(events)[0] == (
        'MountVolume.MountDevice failed for volume "pvc-1" : kubernetes.io/csi: attacher.MountDevice failed to '
        "create newCsiDriverClient: driver name hostpath.csi.k8s.io not found in the list of registered CSI drivers")
    assert node.container()["state"]["waiting"]["reason"] == "ContainerCreating" and not node.runtime.sandboxes


INLINE_DRIVER = "inline.csi.k8s.io"


def inline_pod(csi: dict[str, Any]) -> Any:
    return pod(containers=app({"name": "scratch", "mountPath": "/scratch"}), volumes=[{"name": "scratch", "csi": csi}])


async def test_an_inline_csi_volume_of_a_driver_not_registered_keeps_the_pod_waiting(node, tmp_path):
    events = record_events(node)
    with_api(node)
    node.dispatcher.set_pods([inline_pod({"driver": INLINE_DRIVER})])
    await until(lambda: len(failed_mounts(events)) >= 2, what="tried twice")
    assert failed_mounts(events)[0] == (
        'MountVolume.SetUp failed for volume "scratch" : kubernetes.io/csi: mounter.SetUpAt failed to get CSI '
        f"client: driver name {INLINE_DRIVER} not found in the list of registered CSI drivers")
    assert node.container()["state"]["waiting"]["reason"] == "ContainerCreating" and not node.runtime.sandboxes


async def test_an_inline_csi_volume_without_a_driver_is_refused_naming_the_field(node, tmp_path):
    events = record_events(node)
    with_api(node)
    node.dispatcher.set_pods([inline_pod({"readOnly": True})])
    await until(lambda: failed_mounts(events), what="a FailedMount event")
    assert failed_mounts(events)[0] == (
        "Unable to attach or mount volumes: unmounted volumes=[scratch], unattached volumes=[], failed to process "
        "volumes=[scratch]: pod default/web: volume 'scratch': spec.volumes[0].csi.driver: required")
    assert not node.runtime.sandboxes
