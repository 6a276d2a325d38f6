"""A registered CSI driver's node information in the API: the Node's annotation and labels, and
the node's CSINode object, written as the kubelet writes them.

- Node annotation csi.volume.kubernetes.io/nodeid: a JSON object driver -> the driver's node ID
  (the attach/detach controller reads it); each topology segment the driver reports becomes a
  Node label (a label already there with another value is a collision, an error).
- CSINode <node>: one spec.drivers entry per driver {name, nodeID, topologyKeys (sorted),
  allocatable.count when the driver gives a volume limit}; the scheduler reads it. Created when
  missing, owned by the Node, with the in-tree plugins this release hands to CSI drivers listed
  in its annotation; one owned by another Node of that name (deleted and re-created) is replaced.

Deregistering removes the CSINode entry and the annotation's key; labels stay (the kubelet's way).
The Node authorizer lets a node write exactly these: its own Node (through nodes/status) and
its own CSINode. Writes are read-modify-write and retried on a conflict.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Protocol

from pykubelet.kube.errors import Conflict, KubeError, NotFound

NODE_ID_ANNOTATION = "csi.volume.kubernetes.io/nodeid"
MIGRATED_PLUGINS_ANNOTATION = "storage.alpha.kubernetes.io/migrated-plugins"
MIGRATED_PLUGINS = ("kubernetes.io/aws-ebs", "kubernetes.io/azure-disk", "kubernetes.io/azure-file",
                    "kubernetes.io/cinder", "kubernetes.io/gce-pd", "kubernetes.io/portworx-volume",
                    "kubernetes.io/vsphere-volume")
"""The in-tree volume plugins whose volumes go to CSI drivers in this release (all of them, sorted)."""
MAX_INT32 = 2**31 - 1
_ATTEMPTS = 5
_FIRST_RETRY_SECONDS = 0.5


class Client(Protocol):
    """The kube client calls used here (pykubelet.kube.client.KubeClient has them)."""

    async def get(self, path: str) -> Any: ...
    async def create(self, path: str, body: dict[str, Any]) -> Any: ...
    async def replace(self, path: str, body: dict[str, Any]) -> Any: ...
    async def patch(self, path: str, body: dict[str, Any]) -> Any: ...
    async def delete(self, path: str) -> Any: ...


class NodeInfoError(Exception):
    """The driver's node information cannot be written; the message says which object and why."""


def node_ids(annotations: dict[str, Any]) -> dict[str, str]:
    """The nodeid annotation's map (empty when absent); NodeInfoError when it is not a JSON map."""
    value = annotations.get(NODE_ID_ANNOTATION) or ""
    if not value:
        return {}
    try:
        parsed = json.loads(value)
    except ValueError as e:
        raise NodeInfoError(f"failed to parse node's {NODE_ID_ANNOTATION!r} annotation value ({value!r}) err={e}") from None
    if not isinstance(parsed, dict) or not all(isinstance(v, str) for v in parsed.values()):
        raise NodeInfoError(f"failed to parse node's {NODE_ID_ANNOTATION!r} annotation value ({value!r})")
    return parsed


def encode_node_ids(ids: dict[str, str]) -> str:
    return json.dumps(ids, sort_keys=True, separators=(",", ":"))  # as Go marshals a map


def check_topology(labels: dict[str, str], topology: dict[str, str]) -> None:
    for key, value in sorted(topology.items()):
        current = labels.get(key)
        if current is not None and current != value:
            raise NodeInfoError(f"detected topology value collision: driver reported {key!r}:{value!r} "
                                f"but existing label is {key!r}:{current!r}")


def driver_entry(name: str, node_id: str, max_volumes: int, topology: dict[str, str]) -> dict[str, Any]:
    """The CSINode spec.drivers entry of one driver."""
    entry: dict[str, Any] = {"name": name, "nodeID": node_id, "topologyKeys": sorted(topology)}
    if max_volumes > 0:
        entry["allocatable"] = {"count": min(max_volumes, MAX_INT32)}
    return entry


def new_csinode(node_name: str, node_uid: str) -> dict[str, Any]:
    return {"apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
            "metadata": {"name": node_name,
                         "annotations": {MIGRATED_PLUGINS_ANNOTATION: ",".join(MIGRATED_PLUGINS)},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid}]},
            "spec": {"drivers": []}}


def _owned_by(csinode: dict[str, Any], node_uid: str) -> bool:
    owners = (csinode.get("metadata") or {}).get("ownerReferences") or []
    node_owners = [o for o in owners if isinstance(o, dict) and o.get("kind") == "Node"]
    return not node_owners or any(o.get("uid") == node_uid for o in node_owners)


class NodeInfoWriter:
    """Writes the node information of the drivers that register on node `node_name`."""

    def __init__(self, client: Client, node_name: str):
        self.client = client
        self.node_name = node_name
        self._lock = asyncio.Lock()  # one read-modify-write of these objects at a time

    @property
    def _node_path(self) -> str:
        return f"/api/v1/nodes/{self.node_name}"

    @property
    def _csinode_path(self) -> str:
        return f"/apis/storage.k8s.io/v1/csinodes/{self.node_name}"

    async def install_driver(self, name: str, node_id: str, max_volumes: int, topology: dict[str, str]) -> None:
        if not node_id:
            raise NodeInfoError("error adding CSI driver node info: driverNodeID must not be empty")
        async with self._lock:
            node_uid = await self._retried(lambda: self._install_in_node(name, node_id, topology),
                                           "error updating Node object with CSI driver node info")
            await self._retried(lambda: self._install_in_csinode(name, node_id, max_volumes, topology, node_uid),
                                "error updating CSINode object with CSI driver node info")

    async def uninstall_driver(self, name: str) -> None:
        async with self._lock:
            await self._retried(lambda: self._uninstall_from_csinode(name),
                                "error uninstalling CSI driver from CSINode object")
            await self._retried(lambda: self._uninstall_from_node(name),
                                "error removing CSI driver node info from Node object")

    async def _retried(self, attempt: Any, what: str) -> Any:
        delay = _FIRST_RETRY_SECONDS
        for left in range(_ATTEMPTS - 1, -1, -1):
            try:
                return await attempt()
            except NodeInfoError as e:
                raise NodeInfoError(f"{what}: {e}") from None
            except KubeError as e:  # an apiserver answer or no answer: read again, retry
                if not left:
                    raise NodeInfoError(f"{what}: {e}") from None
                if not isinstance(e, Conflict):
                    await asyncio.sleep(delay)
                    delay *= 2

    async def _install_in_node(self, name: str, node_id: str, topology: dict[str, str]) -> str:
        node = await self.client.get(self._node_path)
        meta = node.get("metadata") or {}
        ids, labels = node_ids(meta.get("annotations") or {}), meta.get("labels") or {}
        check_topology(labels, topology)
        changed_labels = {k: v for k, v in topology.items() if labels.get(k) != v}
        if ids.get(name) != node_id or changed_labels:
            ids[name] = node_id
            await self._patch_node(meta, {NODE_ID_ANNOTATION: encode_node_ids(ids)}, changed_labels)
        return str(meta.get("uid", ""))

    async def _uninstall_from_node(self, name: str) -> None:
        node = await self.client.get(self._node_path)
        meta = node.get("metadata") or {}
        ids = node_ids(meta.get("annotations") or {})
        if name not in ids:
            return
        del ids[name]
        await self._patch_node(meta, {NODE_ID_ANNOTATION: encode_node_ids(ids) if ids else None}, {})

    async def _patch_node(self, meta: dict[str, Any], annotations: dict[str, Any], labels: dict[str, str]) -> None:
        # Through nodes/status, as the kubelet does (it may change metadata too); the
        # resourceVersion makes it fail on a concurrent change rather than overwrite it.
        patch: dict[str, Any] = {"resourceVersion": meta.get("resourceVersion"), "annotations": annotations}
        if labels:
            patch["labels"] = labels
        await self.client.patch(f"{self._node_path}/status", {"metadata": patch})

    async def _csinode(self, node_uid: str) -> dict[str, Any]:
        """The node's CSINode, made when missing or when another Node of this name owns it."""
        try:
            csinode = await self.client.get(self._csinode_path)
        except NotFound:
            return await self.client.create("/apis/storage.k8s.io/v1/csinodes", new_csinode(self.node_name, node_uid))
        if node_uid and not _owned_by(csinode, node_uid):
            await self.client.delete(self._csinode_path)
            return await self.client.create("/apis/storage.k8s.io/v1/csinodes", new_csinode(self.node_name, node_uid))
        return csinode

    async def _install_in_csinode(self, name: str, node_id: str, max_volumes: int, topology: dict[str, str],
                                  node_uid: str) -> None:
        csinode = await self._csinode(node_uid)
        spec = csinode.setdefault("spec", {})
        drivers = [d for d in spec.get("drivers") or [] if isinstance(d, dict)]
        entry = driver_entry(name, node_id, max_volumes, topology)
        current = next((d for d in drivers if d.get("name") == name), None)
        if current is not None and _same_entry(current, entry):
            return
        spec["drivers"] = [d for d in drivers if d.get("name") != name] + [entry]
        await self.client.replace(self._csinode_path, csinode)

    async def _uninstall_from_csinode(self, name: str) -> None:
        try:
            csinode = await self.client.get(self._csinode_path)
        except NotFound:
            return
        drivers = (csinode.get("spec") or {}).get("drivers") or []
        kept = [d for d in drivers if not (isinstance(d, dict) and d.get("name") == name)]
        if len(kept) != len(drivers):
            csinode["spec"]["drivers"] = kept
            await self.client.replace(self._csinode_path, csinode)


def _same_entry(current: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Nothing to write: same node ID, topology keys and volume limit (or none on both sides)."""
    def count(entry: dict[str, Any]) -> Any:
        return (entry.get("allocatable") or {}).get("count")
    return (current.get("nodeID") == wanted["nodeID"] and count(current) == count(wanted)
            and set(current.get("topologyKeys") or []) == set(wanted["topologyKeys"]))
