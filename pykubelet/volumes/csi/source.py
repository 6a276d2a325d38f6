"""A PersistentVolume's spec.csi as the node reads it, and the secrets it names.

Parsing is pure: a field of the wrong shape is a CsiSourceError naming the PV and the field, so
one bad PV keeps only its own pods waiting. The secrets (nodeStageSecretRef for NodeStageVolume,
nodePublishSecretRef for NodePublishVolume) are read with a GET handed in, as the kubelet reads
them: every key of the Secret's data, decoded, in the kubelet's words when that fails.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from pykubelet.kube.errors import KubeError

Get = Callable[[str], Awaitable[Any]]

POD_NAME_KEY = "csi.storage.k8s.io/pod.name"
POD_NAMESPACE_KEY = "csi.storage.k8s.io/pod.namespace"
POD_UID_KEY = "csi.storage.k8s.io/pod.uid"
SERVICE_ACCOUNT_KEY = "csi.storage.k8s.io/serviceAccount.name"
EPHEMERAL_KEY = "csi.storage.k8s.io/ephemeral"


class CsiSourceError(ValueError):
    """A spec.csi field of the wrong shape; the message names the PV and the field."""


class SecretFetchError(Exception):
    """A secret the volume names cannot be read (yet): retried on the next attempt."""


@dataclass(frozen=True)
class SecretRef:
    namespace: str
    name: str


@dataclass(frozen=True)
class CsiPersistentSource:
    driver: str
    volume_handle: str
    fs_type: str = ""
    read_only: bool = False
    """spec.csi.readOnly; NodePublishVolume is told the pod's claim readOnly instead (the kubelet's rule)."""
    volume_attributes: dict[str, str] = field(default_factory=dict)
    node_stage_secret_ref: SecretRef | None = None
    node_publish_secret_ref: SecretRef | None = None


def _fail(pv: str, path: str, expected: str) -> CsiSourceError:
    return CsiSourceError(f"PersistentVolume {pv}: spec.csi.{path}: expected {expected}")


def _text(pv: str, obj: dict[str, Any], key: str, path: str = "", required: bool = False) -> str:
    value = obj.get(key)
    if value is None or value == "":
        if required:
            raise CsiSourceError(f"PersistentVolume {pv}: spec.csi.{path}{key}: required")
        return ""
    if not isinstance(value, str):
        raise _fail(pv, f"{path}{key}", "a string")
    return value


def _secret_ref(pv: str, obj: dict[str, Any], key: str) -> SecretRef | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _fail(pv, key, "an object")
    return SecretRef(_text(pv, value, "namespace", f"{key}."), _text(pv, value, "name", f"{key}.", required=True))


def parse_csi_source(pv_name: str, source: Any) -> CsiPersistentSource:
    """The PV's spec.csi (source: that object as written)."""
    if not isinstance(source, dict):
        raise CsiSourceError(f"PersistentVolume {pv_name}: spec.csi: expected an object")
    attributes = source.get("volumeAttributes") or {}
    if not isinstance(attributes, dict) or not all(isinstance(v, str) for v in attributes.values()):
        raise _fail(pv_name, "volumeAttributes", "an object of strings")
    read_only = source.get("readOnly", False)
    if not isinstance(read_only, bool):
        raise _fail(pv_name, "readOnly", "a boolean")
    return CsiPersistentSource(
        driver=_text(pv_name, source, "driver", required=True),
        volume_handle=_text(pv_name, source, "volumeHandle", required=True),
        fs_type=_text(pv_name, source, "fsType"), read_only=read_only, volume_attributes=dict(attributes),
        node_stage_secret_ref=_secret_ref(pv_name, source, "nodeStageSecretRef"),
        node_publish_secret_ref=_secret_ref(pv_name, source, "nodePublishSecretRef"))


async def fetch_secret(get: Get, ref: SecretRef, field_name: str) -> dict[str, str]:
    """The Secret's data, decoded; SecretFetchError as the kubelet words it (field_name:
    NodeStageSecretRef or NodePublishSecretRef)."""
    def failed(why: str) -> SecretFetchError:
        return SecretFetchError(f"fetching {field_name} {ref.namespace}/{ref.name} failed: kubernetes.io/csi: "
                                f"failed to find the secret {ref.name} in the namespace {ref.namespace} with error: {why}")
    try:
        secret = await get(f"/api/v1/namespaces/{ref.namespace}/secrets/{ref.name}")
    except KubeError as e:
        raise failed(e.message or str(e)) from None
    data = secret.get("data") if isinstance(secret, dict) else None
    out: dict[str, str] = {}
    for key, value in (data or {}).items() if isinstance(data, dict) else ():
        try:
            out[key] = base64.b64decode(value, validate=True).decode("utf-8", "surrogateescape")
        except (binascii.Error, TypeError, ValueError):
            raise failed(f"data[{key}] is not base64") from None
    return out


def pod_info_context(name: str, namespace: str, uid: str, service_account: str, ephemeral: bool) -> dict[str, str]:
    """What a driver whose CSIDriver sets podInfoOnMount is told about the pod, in volume_context."""
    return {POD_NAME_KEY: name, POD_NAMESPACE_KEY: namespace, POD_UID_KEY: uid,
            SERVICE_ACCOUNT_KEY: service_account, EPHEMERAL_KEY: "true" if ephemeral else "false"}
