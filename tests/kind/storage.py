"""kind's default storage, checked as a user would use it: a PersistentVolumeClaim that names no
StorageClass gets kind's default `standard` (local-path-provisioner), binds once a pod on a node
uses it, keeps what one pod wrote for the next pod, and its volume goes when the claim does.
"""

from __future__ import annotations

import json
from typing import Any

from tests.kind.cluster import KindCluster, docker

STORAGE_CLASS = "standard"
PROVISIONER = "rancher.io/local-path"
VOLUMES_ON_NODE = "/var/local-path-provisioner"  # where kind's provisioner config puts them
CLAIM = "data"


def default_storage_class(cluster: KindCluster) -> dict[str, Any]:
    """kind's `standard` StorageClass, checked to be the default and served by local-path."""
    sc = cluster.get("storageclass", STORAGE_CLASS)
    annotations = sc["metadata"].get("annotations", {})
    assert annotations.get("storageclass.kubernetes.io/is-default-class") == "true", \
        f"StorageClass {STORAGE_CLASS} is not the default: {annotations}"
    assert sc["provisioner"] == PROVISIONER, f"StorageClass {STORAGE_CLASS}'s provisioner is {sc['provisioner']!r}"
    return sc


def _apply(cluster: KindCluster, name: str, manifest: dict[str, Any]) -> None:
    path = cluster.workdir / f"{name}.json"
    path.write_text(json.dumps(manifest))
    cluster.kubectl("apply", "-f", str(path))


def _pod(name: str, node: str, image: str, script: str) -> dict[str, Any]:
    # A node selector, not spec.nodeName: the claim binds (WaitForFirstConsumer) on the node the
    # scheduler picks for its first pod.
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "restartPolicy": "Never",
                     "containers": [{"name": "c", "image": image, "imagePullPolicy": "Never",
                                     "command": ["sh", "-c", script],
                                     "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                     "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": CLAIM}}]}}


def _run_pod(cluster: KindCluster, name: str, node: str, image: str, script: str) -> str:
    """A pod running `script` with the claim at /data, on `node`, to completion; its output."""
    _apply(cluster, name, _pod(name, node, image, script))

    def finished() -> str | None:
        phase = cluster.get("pod", name)["status"].get("phase")
        assert phase != "Failed", f"pod {name} failed: {cluster.kubectl('logs', name, check=False)}"
        return phase if phase == "Succeeded" else None
    cluster.wait(finished, 180, f"pod {name} using claim {CLAIM} to succeed")
    return cluster.kubectl("logs", name)


def claim_keeps_data(cluster: KindCluster, node: str, image: str) -> str:
    """A claim of the default class binds for a pod on `node`; what that pod writes, a second pod
    reads back. The claim's volume name."""
    default_storage_class(cluster)
    _apply(cluster, CLAIM, {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": CLAIM},
                            "spec": {"accessModes": ["ReadWriteOnce"],
                                     "resources": {"requests": {"storage": "64Mi"}}}})
    written = _run_pod(cluster, "writer", node, image, "echo kept-on-$(hostname) >/data/file && cat /data/file")
    assert written.strip() == "kept-on-writer", f"the writer pod printed {written!r}"
    claim = cluster.get("pvc", CLAIM)
    assert claim["status"].get("phase") == "Bound", f"claim {CLAIM} is {claim['status']}"
    assert claim["spec"].get("storageClassName") == STORAGE_CLASS, f"claim {CLAIM} got class {claim['spec']}"
    volume = claim["spec"]["volumeName"]
    pv = cluster.get("pv", volume)
    path = pv["spec"].get("hostPath", {}).get("path") or pv["spec"].get("local", {}).get("path", "")
    assert path.startswith(VOLUMES_ON_NODE + "/"), f"volume {volume} is not under {VOLUMES_ON_NODE}: {pv['spec']}"
    read = _run_pod(cluster, "reader", node, image, "cat /data/file")
    assert read.strip() == "kept-on-writer", f"the reader pod read {read!r} from the claim, not the writer's line"
    return volume


def claim_deleted_removes_volume(cluster: KindCluster, node: str, volume: str) -> None:
    """Deleting the pods and the claim deletes its volume (reclaim policy Delete) and, through the
    provisioner's helper pod, its directory on the node."""
    cluster.kubectl("delete", "pod", "writer", "reader", "--wait=true", timeout=120)
    cluster.kubectl("delete", "pvc", CLAIM, "--wait=true", timeout=120)
    cluster.wait(lambda: not cluster.kubectl("get", "pv", "-o", "name").strip(), 180, f"volume {volume} deleted")
    left = docker("exec", node, "ls", "-A", VOLUMES_ON_NODE, check=False).split()
    assert not any(volume in entry for entry in left), f"{VOLUMES_ON_NODE} on {node} still holds {left}"
