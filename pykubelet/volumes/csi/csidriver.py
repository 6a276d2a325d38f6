"""The CSIDriver object of a driver: how the cluster says the node must treat its volumes.

Read with a GET handed in. No CSIDriver is not an error: the kubelet's defaults then apply
(attach required, no pod information, persistent volumes only, fsGroup applied for
ReadWriteOnce volumes with a filesystem type).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from pykubelet.kube.errors import NotFound

Get = Callable[[str], Awaitable[Any]]

PERSISTENT, EPHEMERAL = "Persistent", "Ephemeral"
FS_GROUP_DEFAULT = "ReadWriteOnceWithFSType"


class CsiDriverError(ValueError):
    """A CSIDriver field of the wrong shape; the message names the object and the field."""


@dataclass(frozen=True)
class CsiDriverPolicy:
    name: str
    exists: bool
    attach_required: bool = True
    pod_info_on_mount: bool = False
    lifecycle_modes: tuple[str, ...] = (PERSISTENT,)
    fs_group_policy: str = FS_GROUP_DEFAULT
    requires_republish: bool = False


def _flag(name: str, spec: dict[str, Any], key: str, default: bool) -> bool:
    value = spec.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise CsiDriverError(f"CSIDriver {name}: spec.{key}: expected a boolean")
    return value


def parse_csidriver(name: str, obj: Any) -> CsiDriverPolicy:
    spec = obj.get("spec") if isinstance(obj, dict) else None
    if not isinstance(spec, dict):
        raise CsiDriverError(f"CSIDriver {name}: spec: expected an object")
    modes = spec.get("volumeLifecycleModes") or [PERSISTENT]
    if not isinstance(modes, list) or not all(isinstance(m, str) for m in modes):
        raise CsiDriverError(f"CSIDriver {name}: spec.volumeLifecycleModes: expected a list of strings")
    policy = spec.get("fsGroupPolicy", FS_GROUP_DEFAULT)
    if not isinstance(policy, str) or not policy:
        raise CsiDriverError(f"CSIDriver {name}: spec.fsGroupPolicy: expected a non-empty string")
    return CsiDriverPolicy(name, True, _flag(name, spec, "attachRequired", True),
                           _flag(name, spec, "podInfoOnMount", False), tuple(modes), policy,
                           _flag(name, spec, "requiresRepublish", False))


async def fetch_driver_policy(get: Get, name: str) -> CsiDriverPolicy:
    """The driver's CSIDriver, or the defaults when it has none; KubeError for other failures."""
    try:
        obj = await get(f"/apis/storage.k8s.io/v1/csidrivers/{name}")
    except NotFound:
        return CsiDriverPolicy(name, False)
    return parse_csidriver(name, obj)
