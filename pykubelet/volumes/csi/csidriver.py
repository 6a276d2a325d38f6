"""The CSIDriver object of a driver: how the cluster says the node must treat its volumes.

Read with a GET handed in. No CSIDriver is not an error: the kubelet's defaults then apply
(attach required, no pod information, persistent volumes only, fsGroup applied for
ReadWriteOnce volumes with a filesystem type, no service account tokens, no republishing).
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
class TokenRequest:
    audience: str
    """"" : the apiserver's own audiences."""
    expiration_seconds: int | None = None
    """None: the TokenRequest API's default."""


@dataclass(frozen=True)
class CsiDriverPolicy:
    name: str
    exists: bool
    attach_required: bool = True
    pod_info_on_mount: bool = False
    lifecycle_modes: tuple[str, ...] = (PERSISTENT,)
    fs_group_policy: str = FS_GROUP_DEFAULT
    requires_republish: bool = False
    """NodePublishVolume is called again periodically for a published volume (to refresh tokens...)."""
    token_requests: tuple[TokenRequest, ...] = ()
    """The pod's service account tokens the driver is given at NodePublishVolume, one per audience."""
    token_in_secrets: bool = False
    """serviceAccountTokenInSecrets: those tokens go in the request's secrets, not its volume_context."""


def _flag(name: str, spec: dict[str, Any], key: str, default: bool) -> bool:
    value = spec.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise CsiDriverError(f"CSIDriver {name}: spec.{key}: expected a boolean")
    return value


def _token_requests(name: str, spec: dict[str, Any]) -> tuple[TokenRequest, ...]:
    items = spec.get("tokenRequests")
    if items is None:
        return ()
    if not isinstance(items, list):
        raise CsiDriverError(f"CSIDriver {name}: spec.tokenRequests: expected a list")
    out = []
    for index, item in enumerate(items):
        where = f"CSIDriver {name}: spec.tokenRequests[{index}]"
        if not isinstance(item, dict):
            raise CsiDriverError(f"{where}: expected an object")
        audience, seconds = item.get("audience") or "", item.get("expirationSeconds")
        if not isinstance(audience, str):
            raise CsiDriverError(f"{where}.audience: expected a string")
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int) or seconds <= 0):
            raise CsiDriverError(f"{where}.expirationSeconds: expected a positive integer")
        out.append(TokenRequest(audience, seconds))
    return tuple(out)


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
                           _flag(name, spec, "requiresRepublish", False), _token_requests(name, spec),
                           _flag(name, spec, "serviceAccountTokenInSecrets", False))


async def fetch_driver_policy(get: Get, name: str) -> CsiDriverPolicy:
    """The driver's CSIDriver, or the defaults when it has none; KubeError for other failures."""
    try:
        obj = await get(f"/apis/storage.k8s.io/v1/csidrivers/{name}")
    except NotFound:
        return CsiDriverPolicy(name, False)
    return parse_csidriver(name, obj)
