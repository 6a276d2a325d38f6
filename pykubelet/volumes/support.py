"""Which of a pod's volumes this node can set up, decided from the spec alone (pure).

The kubelet's volume manager first turns each volume a container uses into a volume spec it
has a plugin for; a volume it cannot process (an unbound claim, a type with no plugin) keeps
the pod from starting, with the error in a `FailedMount` event, and the pod is synced again
later. pykubelet does the same, never starting a container with one of its mounts missing:
the application would write into the container's own filesystem and lose the data.

A volume no container mounts is not needed, so it never blocks (the kubelet's expected volumes).
PersistentVolumeClaims (and generic ephemeral volumes, which are claims the controller makes)
and inline CSI volumes pass here: whether they can be processed takes the API and the node's
registered drivers (claims.py, csi/inline.py, claim_volumes.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from pykubelet.api.pod import SUPPORTED_VOLUME_TYPES, Pod, Volume

CLAIM_KINDS = ("persistentVolumeClaim", "ephemeral")
RETRY_SECONDS = 10.0
"""When a pod with a volume that cannot be processed is synced again: the kubelet's pod worker
back-off after a failed sync (its claim may be bound by then)."""


@dataclass(frozen=True)
class Unprocessable:
    """A volume a container needs that the node cannot set up, and the kubelet's words for why."""

    volume: str
    kind: str
    error: str


def mounted_volume_names(pod: Pod) -> set[str]:
    """The volumes some container (init, app or ephemeral) lists in its volumeMounts."""
    return {mount.name for container in (*pod.init_containers, *pod.containers, *pod.ephemeral_containers)
            for mount in container.volume_mounts}


def device_volume_names(pod: Pod) -> set[str]:
    """The volumes some container uses as a block device (volumeDevices)."""
    names: set[str] = set()
    for container in (*pod.init_containers, *pod.containers, *pod.ephemeral_containers):
        devices = container.raw.get("volumeDevices")
        for device in devices if isinstance(devices, list) else []:
            if isinstance(device, dict) and isinstance(device.get("name"), str):
                names.add(device["name"])
    return names


def used_volume_names(pod: Pod) -> set[str]:
    """The volumes some container (init, app or ephemeral) mounts or uses as a block device."""
    return mounted_volume_names(pod) | device_volume_names(pod)


def claim_name(pod: Pod, volume: Volume) -> str:
    """The PersistentVolumeClaim behind the volume: its own, or for a generic ephemeral volume the
    one the controller makes for the pod, `<pod>-<volume>`."""
    if volume.kind == "ephemeral":
        return f"{pod.name}-{volume.name}"
    name = volume.source.get("claimName")
    return name if isinstance(name, str) else ""


def why_unprocessable(pod: Pod, volume: Volume) -> str | None:
    """None when the node can set the volume up; else the error, shaped as the kubelet's."""
    if volume.kind in SUPPORTED_VOLUME_TYPES:  # claims among them, resolved through the API
        return None
    return (f'failed to get Plugin from volumeSpec for volume "{volume.name}" err=no volume plugin matched: '
            f"pykubelet cannot set up {volume.kind} volumes")


def unprocessable_volumes(pod: Pod) -> list[Unprocessable]:
    """The volumes that keep the pod from starting, in the order the spec lists them."""
    used = used_volume_names(pod)
    found = []
    for volume in pod.volumes:
        why = why_unprocessable(pod, volume) if volume.name in used else None
        if why is not None:
            found.append(Unprocessable(volume.name, volume.kind, why))
    return found


def _go_list(names: list[str]) -> str:
    return f"[{' '.join(names)}]"  # how the kubelet prints a list of names


def unable_to_mount_message(unprocessable: list[Unprocessable], unmounted: list[str]) -> str:
    """The pod-level FailedMount event's text, the kubelet's: what is not mounted, what could not
    be processed, and each volume's error."""
    return (f"Unable to attach or mount volumes: unmounted volumes={_go_list(sorted(unmounted))}, "
            f"unattached volumes=[], failed to process volumes={_go_list(sorted(u.volume for u in unprocessable))}: "
            + "; ".join(u.error for u in unprocessable))
