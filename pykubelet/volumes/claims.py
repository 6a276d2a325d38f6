"""A pod's persistentVolumeClaim (or generic ephemeral) volume → its claim → its bound PV.

The kubelet's desired-state populator: a direct GET of the claim in the pod's namespace, then
of the PV the claim names (the Node authorizer lets a node read both for its pods), checked
to be bound to each other. Any failure is a processing error in the kubelet's words: the pod
does not start, and the volume is resolved again on a later sync. The GETs are handed in, so
the rules here are tested with plain dictionaries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from pykubelet.api.pod import Pod, Volume
from pykubelet.kube.errors import KubeError
from pykubelet.volumes.support import claim_name
from pykubelet.volumes.claim_model import (BLOCK, FILESYSTEM, PV_SOURCES_HANDLED, PVC_PROTECTION_FINALIZER,
                                           ClaimObjectError, PersistentVolume, PersistentVolumeClaim, parse_claim,
                                           parse_volume)

Get = Callable[[str], Awaitable[Any]]
"""GET of an API path; raises KubeError (NotFound...) as the kube client does."""


class ClaimError(Exception):
    """The volume cannot be processed; the message is the kubelet's."""


@dataclass(frozen=True)
class ResolvedClaim:
    """A pod volume backed by a PV this node can set up."""

    volume: str
    """The pod's volume name."""
    claim: PersistentVolumeClaim
    pv: PersistentVolume
    read_only: bool
    """persistentVolumeClaim.readOnly: the whole volume is mounted read-only."""


def _why(e: Exception) -> str:
    return (e.message or str(e)) if isinstance(e, KubeError) else str(e)


async def _fetch(get: Get, path: str, what: str) -> Any:
    """The object at path; ClaimError in the kubelet's words ("failed to fetch PVC from API server: ...")."""
    try:
        return await get(path)
    except KubeError as e:
        raise ClaimError(f"failed to fetch {what} from API server: {_why(e)}") from None


async def _fetch_claim(get: Get, namespace: str, name: str) -> PersistentVolumeClaim:
    claim = parse_claim(await _fetch(get, f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}", "PVC"))
    # A claim being deleted still protected by its finalizer keeps its running pods (and a
    # restarted node must not fail them); one with no protection left must not start any.
    if claim.being_deleted and PVC_PROTECTION_FINALIZER not in claim.finalizers:
        raise ClaimError("PVC is being deleted")
    if claim.phase != "Bound":
        raise ClaimError("PVC is not bound")
    if not claim.volume_name:
        raise ClaimError("PVC has empty pvc.Spec.VolumeName")
    return claim


async def _fetch_volume(get: Get, name: str, claim_uid: str) -> PersistentVolume:
    pv = parse_volume(await _fetch(get, f"/api/v1/persistentvolumes/{name}", f"PV {name}"))
    if pv.claim_uid is None:
        raise ClaimError(f"found PV object {name} but it has a nil pv.Spec.ClaimRef "
                         f"indicating it is not yet bound to the claim")
    if pv.claim_uid != claim_uid:
        raise ClaimError(f"found PV object {name} but its pv.Spec.ClaimRef.UID {pv.claim_uid} "
                         f"does not point to claim.UID {claim_uid}")
    return pv


def _is_for_pod(pod: Pod, claim: PersistentVolumeClaim) -> bool:
    """The ephemeral volume's claim is the pod's own: controlled by it (not someone's look-alike)."""
    return claim.namespace == pod.namespace and any(o.controller and o.uid == pod.uid for o in claim.owners)


async def resolve(pod: Pod, volume: Volume, get: Get, mounted: bool, as_device: bool) -> ResolvedClaim:
    """The claim and PV behind the volume; ClaimError with the kubelet's text when the pod
    cannot use them yet. `mounted`/`as_device`: whether some container lists the volume in
    volumeMounts / volumeDevices."""
    name = claim_name(pod, volume)
    where = f"error processing PVC {pod.namespace}/{name}"
    try:
        claim = await _fetch_claim(get, pod.namespace, name)
    except (ClaimError, ClaimObjectError) as e:
        raise ClaimError(f"{where}: {e}") from None
    if volume.kind == "ephemeral" and not _is_for_pod(pod, claim):
        raise ClaimError(f"PVC {claim.namespace}/{claim.name} was not created for pod "
                         f"{pod.namespace}/{pod.name} (pod is not owner)")
    try:
        pv = await _fetch_volume(get, claim.volume_name, claim.uid)
    except (ClaimError, ClaimObjectError) as e:
        raise ClaimError(f"{where}: {e}") from None
    if mounted and pv.volume_mode != FILESYSTEM:
        raise ClaimError(f"volume {volume.name} has volumeMode {pv.volume_mode}, but is specified in volumeMounts")
    if as_device and pv.volume_mode != BLOCK:
        raise ClaimError(f"volume {volume.name} has volumeMode {pv.volume_mode}, but is specified in volumeDevices")
    # Block devices come only from CSI drivers here (not from hostPath or local PVs).
    if pv.source_kind not in PV_SOURCES_HANDLED or (as_device and pv.source_kind != "csi"):
        what = f"{pv.source_kind or 'unknown'}{' block' if as_device else ''}"
        raise ClaimError(f'failed to get Plugin from volumeSpec for volume "{pv.name}" err=no volume plugin matched: '
                         f"pykubelet cannot set up {what} volumes")
    read_only = volume.kind == "persistentVolumeClaim" and volume.source.get("readOnly") is True
    return ResolvedClaim(volume.name, claim, pv, read_only)
