"""PersistentVolumeClaims and PersistentVolumes as the node reads them (pure parse).

Only the fields the node acts on are kept; anything else in the objects is ignored. A field of
the wrong shape is a ClaimObjectError naming the object and the field, so one bad PV or claim
keeps only its own pods waiting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PVC_PROTECTION_FINALIZER = "kubernetes.io/pvc-protection"
READ_WRITE_ONCE_POD = "ReadWriteOncePod"
FILESYSTEM = "Filesystem"
BLOCK = "Block"
PV_SOURCES_HANDLED = ("hostPath", "local", "csi")
"""The PV types this node sets up: the kubelet's hostPath and local plugins, and CSI drivers."""


class ClaimObjectError(ValueError):
    """A claim or volume whose field has the wrong shape; the message names object and field."""


@dataclass(frozen=True)
class OwnerReference:
    kind: str
    name: str
    uid: str
    controller: bool


@dataclass(frozen=True)
class PersistentVolumeClaim:
    namespace: str
    name: str
    uid: str
    phase: str
    volume_name: str
    being_deleted: bool
    finalizers: tuple[str, ...]
    owners: tuple[OwnerReference, ...]


@dataclass(frozen=True)
class NodeSelectorRequirement:
    key: str
    operator: str
    values: tuple[str, ...]


@dataclass(frozen=True)
class NodeSelectorTerm:
    match_expressions: tuple[NodeSelectorRequirement, ...]
    match_fields: tuple[NodeSelectorRequirement, ...]


@dataclass(frozen=True)
class PersistentVolume:
    name: str
    claim_uid: str | None
    """spec.claimRef.uid; None when the PV has no claimRef (not bound to any claim)."""
    access_modes: tuple[str, ...]
    volume_mode: str
    mount_options: tuple[str, ...]
    source_kind: str
    """The PV's type: hostPath, local, nfs, csi... ("" when it names none)."""
    source: dict[str, Any]
    """That type's object as written (hostPath.path and type, local.path...)."""
    node_affinity: tuple[NodeSelectorTerm, ...] | None
    """spec.nodeAffinity.required.nodeSelectorTerms; None when no required affinity is set."""


class _Reader:
    """Typed reads of one object's fields, each error naming the object and the field."""

    def __init__(self, what: str):
        self.what = what

    def fail(self, path: str, expected: str) -> ClaimObjectError:
        return ClaimObjectError(f"{self.what}: {path}: expected {expected}")

    def obj(self, value: Any, path: str) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(path, "an object")
        return value

    def text(self, value: Any, path: str) -> str:
        if value is None:
            return ""
        if not isinstance(value, str):
            raise self.fail(path, "a string")
        return value

    def texts(self, value: Any, path: str) -> tuple[str, ...]:
        if value is None:
            return ()
        if not isinstance(value, list):
            raise self.fail(path, "a list of strings")
        return tuple(self.text(v, f"{path}[{i}]") for i, v in enumerate(value))

    def objects(self, value: Any, path: str) -> list[dict[str, Any]]:
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(path, "a list")
        return [self.obj(v, f"{path}[{i}]") for i, v in enumerate(value)]


def parse_claim(obj: Any) -> PersistentVolumeClaim:
    r = _Reader("PersistentVolumeClaim")
    top = r.obj(obj, "(object)")
    meta = r.obj(top.get("metadata"), "metadata")
    r.what = f"PersistentVolumeClaim {r.text(meta.get('namespace'), 'metadata.namespace')}/" \
             f"{r.text(meta.get('name'), 'metadata.name')}"
    spec = r.obj(top.get("spec"), "spec")
    status = r.obj(top.get("status"), "status")
    owners = []
    for i, ref in enumerate(r.objects(meta.get("ownerReferences"), "metadata.ownerReferences")):
        path = f"metadata.ownerReferences[{i}]"
        controller = ref.get("controller")
        if controller is not None and not isinstance(controller, bool):
            raise r.fail(f"{path}.controller", "a boolean")
        owners.append(OwnerReference(r.text(ref.get("kind"), f"{path}.kind"), r.text(ref.get("name"), f"{path}.name"),
                                     r.text(ref.get("uid"), f"{path}.uid"), bool(controller)))
    return PersistentVolumeClaim(
        namespace=r.text(meta.get("namespace"), "metadata.namespace"), name=r.text(meta.get("name"), "metadata.name"),
        uid=r.text(meta.get("uid"), "metadata.uid"), phase=r.text(status.get("phase"), "status.phase"),
        volume_name=r.text(spec.get("volumeName"), "spec.volumeName"),
        being_deleted=meta.get("deletionTimestamp") is not None,
        finalizers=r.texts(meta.get("finalizers"), "metadata.finalizers"), owners=tuple(owners))


def _requirements(r: _Reader, value: Any, path: str) -> tuple[NodeSelectorRequirement, ...]:
    out = []
    for i, item in enumerate(r.objects(value, path)):
        where = f"{path}[{i}]"
        out.append(NodeSelectorRequirement(r.text(item.get("key"), f"{where}.key"),
                                           r.text(item.get("operator"), f"{where}.operator"),
                                           r.texts(item.get("values"), f"{where}.values")))
    return tuple(out)


def _node_affinity(r: _Reader, spec: dict[str, Any]) -> tuple[NodeSelectorTerm, ...] | None:
    affinity = r.obj(spec.get("nodeAffinity"), "spec.nodeAffinity")
    if affinity.get("required") is None:
        return None
    required = r.obj(affinity["required"], "spec.nodeAffinity.required")
    path = "spec.nodeAffinity.required.nodeSelectorTerms"
    terms = []
    for i, term in enumerate(r.objects(required.get("nodeSelectorTerms"), path)):
        terms.append(NodeSelectorTerm(_requirements(r, term.get("matchExpressions"), f"{path}[{i}].matchExpressions"),
                                      _requirements(r, term.get("matchFields"), f"{path}[{i}].matchFields")))
    return tuple(terms)


def _source(r: _Reader, spec: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The PV's one volume type: the first spec key holding an object that is not a PV field."""
    not_sources = {"accessModes", "capacity", "claimRef", "mountOptions", "nodeAffinity",
                   "persistentVolumeReclaimPolicy", "storageClassName", "volumeMode", "volumeAttributesClassName"}
    for key, value in spec.items():
        if key not in not_sources and isinstance(value, dict):
            return key, value
    return "", {}


def parse_volume(obj: Any) -> PersistentVolume:
    r = _Reader("PersistentVolume")
    top = r.obj(obj, "(object)")
    meta = r.obj(top.get("metadata"), "metadata")
    name = r.text(meta.get("name"), "metadata.name")
    r.what = f"PersistentVolume {name}"
    spec = r.obj(top.get("spec"), "spec")
    claim_ref = spec.get("claimRef")
    claim_uid = None if claim_ref is None else r.text(r.obj(claim_ref, "spec.claimRef").get("uid"),
                                                      "spec.claimRef.uid")
    kind, source = _source(r, spec)
    for field in ("path", "type"):
        r.text(source.get(field), f"spec.{kind}.{field}")
    return PersistentVolume(
        name=name, claim_uid=claim_uid, access_modes=r.texts(spec.get("accessModes"), "spec.accessModes"),
        volume_mode=r.text(spec.get("volumeMode"), "spec.volumeMode") or FILESYSTEM,
        mount_options=r.texts(spec.get("mountOptions"), "spec.mountOptions"), source_kind=kind, source=source,
        node_affinity=_node_affinity(r, spec))
