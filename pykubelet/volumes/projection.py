"""What a configMap, secret or downwardAPI volume (or projected source) holds: path -> bytes
and mode, built as the kubelet's MakePayload and CollectData build it. Pure functions.
"""

from __future__ import annotations

import base64
import re
from typing import Any

from pykubelet.api.pod import Pod
from pykubelet.runtime.env import ContainerConfigError, resource_field_value
from pykubelet.volumes.atomic_writer import FileProjection

DEFAULT_MODE = 0o644  # what the API defaults defaultMode to (420)


class MountError(Exception):
    """A volume that cannot be set up now; the message is the kubelet's (`configmap "x" not found`)."""


def _mode(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def object_payload(kind: str, obj: dict[str, Any] | None, items: list[dict[str, Any]] | None,
                   default_mode: int, optional: bool) -> dict[str, FileProjection]:
    """A ConfigMap's (kind "configmap") or Secret's ("secret") keys as files.

    `obj` None means the object does not exist and the reference is optional: no files.
    Without items every key becomes a file of that name; with items only the listed keys,
    at their paths, and a listed key that is missing fails unless the reference is optional.
    """
    if obj is None:
        return {}
    if kind == "secret":
        data = {k: base64.b64decode(v or "") for k, v in (obj.get("data") or {}).items()}
    else:
        data = {k: (v or "").encode() for k, v in (obj.get("data") or {}).items()}
        data.update({k: base64.b64decode(v or "") for k, v in (obj.get("binaryData") or {}).items()})
    if not items:
        return {key: FileProjection(value, default_mode) for key, value in data.items()}
    out = {}
    for item in items:
        key = item.get("key", "")
        if key not in data:
            if optional:
                continue
            what = "configmap references non-existent config key" if kind == "configmap" \
                else "references non-existent secret key"
            raise MountError(f"{what}: {key}")
        out[item.get("path") or key] = FileProjection(data[key], _mode(item.get("mode"), default_mode))
    return out


def go_quote(text: str) -> str:
    """Go's %q of a string: what the kubelet writes for each label and annotation value."""
    out = ['"']
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch in "\a\b\f\n\r\t\v":
            out.append("\\" + "abfnrtv"["\a\b\f\n\r\t\v".index(ch)])
        elif ch.isprintable():
            out.append(ch)
        elif ord(ch) < 0x80:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) <= 0xFFFF:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    out.append('"')
    return "".join(out)


def format_map(values: dict[str, str]) -> str:
    """key="value" lines in key order, no trailing newline (the kubelet's labels/annotations files)."""
    return "\n".join(f"{key}={go_quote(values[key])}" for key in sorted(values))


_ONE_KEY = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


def _field_value(pod: Pod, path: str) -> str:
    simple = {"metadata.name": pod.name, "metadata.namespace": pod.namespace, "metadata.uid": pod.uid}
    if path in simple:
        return simple[path]
    if path == "metadata.labels":
        return format_map(pod.labels)
    if path == "metadata.annotations":
        return format_map(pod.annotations)
    match = _ONE_KEY.match(path)
    if match:
        return (pod.labels if match.group(1) == "labels" else pod.annotations).get(match.group(2), "")
    raise MountError(f"unsupported fieldPath: {path}")


def downward_api_payload(pod: Pod, items: list[dict[str, Any]] | None, default_mode: int,
                         allocatable: dict[str, float]) -> dict[str, FileProjection]:
    """Files from the pod's own metadata and its containers' resources."""
    out = {}
    errors = []
    for item in items or []:
        path = item.get("path", "")
        try:
            if item.get("fieldRef"):
                value = _field_value(pod, item["fieldRef"].get("fieldPath", ""))
            elif item.get("resourceFieldRef"):
                value = resource_field_value(pod, item["resourceFieldRef"], allocatable)
            else:
                continue
        except (MountError, ContainerConfigError) as e:
            errors.append(f"{path}: {e}")
            continue
        out[path] = FileProjection(value.encode(), _mode(item.get("mode"), default_mode))
    if errors:
        raise MountError(aggregate(errors))
    return out


def aggregate(messages: list[str]) -> str:
    """One message as itself, several as [a, b] (Kubernetes' error aggregate)."""
    return messages[0] if len(messages) == 1 else f"[{', '.join(messages)}]"
