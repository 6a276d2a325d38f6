"""A container's volumeMounts[], parsed and validated as the API validates them.

Kept apart from pod_parse.py, which reads the rest of the Pod; the errors land in the same
reader, so a bad mount is reported with every other bad field of the pod.
"""

from __future__ import annotations

from typing import Any

from pykubelet.api.field_reader import FieldReader
from pykubelet.api.pod import MOUNT_PROPAGATIONS, VolumeMount


def _privileged(container: dict[str, Any]) -> bool:
    ctx = container.get("securityContext")
    return isinstance(ctx, dict) and ctx.get("privileged") is True


def _mount_propagation(r: FieldReader, mount: dict[str, Any], where: str, privileged: bool) -> str:
    """mountPropagation: one of the API's modes; Bidirectional lets the container's mounts reach
    the host (a CSI node plugin's), so the API keeps it to privileged containers."""
    mode = r.choice(mount, "mountPropagation", where, MOUNT_PROPAGATIONS, "")
    if mode == "Bidirectional" and not privileged:
        r.fail(f"{where}.mountPropagation",
               "Forbidden: Bidirectional mount propagation is available only to privileged containers")
    return mode


def parse_volume_mounts(r: FieldReader, container: dict[str, Any], path: str) -> list[VolumeMount]:
    """The container's volumeMounts (`path` is the container's, e.g. spec.containers[0])."""
    mounts = []
    privileged = _privileged(container)
    for i, item in enumerate(r.items(container.get("volumeMounts"), f"{path}.volumeMounts")):
        where = f"{path}.volumeMounts[{i}]"
        mount = r.mapping(item, where)
        if mount:
            sub_path, sub_path_expr = r.string(mount, "subPath", where), r.string(mount, "subPathExpr", where)
            if sub_path and sub_path_expr:
                r.fail(f"{where}.subPathExpr", "Invalid value: subPathExpr and subPath are mutually exclusive")
            mounts.append(VolumeMount(name=r.string(mount, "name", where), mount_path=r.string(mount, "mountPath", where),
                                      sub_path=sub_path, sub_path_expr=sub_path_expr,
                                      read_only=r.boolean(mount, "readOnly", where),
                                      mount_propagation=_mount_propagation(r, mount, where, privileged)))
    return mounts
