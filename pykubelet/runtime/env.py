"""A container's environment as the kubelet builds it: value, valueFrom fieldRef and
resourceFieldRef, and $(VAR) expansion in env values, command and args."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pykubelet.api.pod import Container, Pod
from pykubelet.api.quantity import cpu_millis, quantity_bytes


class ContainerConfigError(ValueError):
    """The container cannot be configured (CreateContainerConfigError); the message says why."""


@dataclass(frozen=True)
class PodFacts:
    """What fieldRef can point at that the spec does not hold."""

    node_name: str
    host_ip: str
    pod_ip: str


_LABEL_OR_ANNOTATION = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")
_REFERENCE = re.compile(r"\$\$|\$\(([^)]*)\)")


def expand(text: str, env: dict[str, str]) -> str:
    """$(VAR) -> its value when defined, else kept; $$ -> $ (the API's expansion rules)."""
    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)
    return _REFERENCE.sub(substitute, text)


def _field_ref(pod: Pod, facts: PodFacts, path: str) -> str:
    simple = {
        "metadata.name": pod.name, "metadata.namespace": pod.namespace, "metadata.uid": pod.uid,
        "spec.nodeName": facts.node_name,
        "spec.serviceAccountName": pod.raw.get("spec", {}).get("serviceAccountName", ""),
        "status.hostIP": facts.host_ip, "status.hostIPs": facts.host_ip,
        "status.podIP": facts.pod_ip, "status.podIPs": facts.pod_ip,
    }
    if path in simple:
        return simple[path]
    match = _LABEL_OR_ANNOTATION.match(path)
    if match:
        return (pod.labels if match.group(1) == "labels" else pod.annotations).get(match.group(2), "")
    raise ContainerConfigError(f"unsupported fieldRef.fieldPath {path!r}")


def _resource_ref(pod: Pod, container: Container, ref: dict[str, Any], allocatable: dict[str, float]) -> str:
    target = container
    if ref.get("containerName"):
        target = next((c for c in pod.containers if c.name == ref["containerName"]), None)
        if target is None:
            raise ContainerConfigError(f"resourceFieldRef.containerName {ref['containerName']!r} is not in the pod")
    resource = ref.get("resource", "")
    kind, _, name = resource.partition(".")
    spec = target.raw.get("resources") or {}
    raw = (spec.get(kind) or {}).get(name)
    if raw is None and kind == "requests":
        raw = (spec.get("limits") or {}).get(name)  # the API defaults a missing request to the limit
    if raw is None and kind == "limits":
        raw = allocatable.get(name)  # no limit: the node's allocatable, as the kubelet reports
    if raw is None:
        raw = 0
    if name not in ("cpu", "memory", "ephemeral-storage") or kind not in ("limits", "requests"):
        raise ContainerConfigError(f"unsupported resourceFieldRef.resource {resource!r}")
    # The kubelet's integer arithmetic: cpu in millicores, the rest in bytes; divisor 0 means unset (1).
    to_int = cpu_millis if name == "cpu" else quantity_bytes
    try:
        amount = to_int(raw)
        divisor = to_int(ref.get("divisor") or "1") or to_int("1")
    except ValueError as e:
        raise ContainerConfigError(f"resourceFieldRef {resource!r}: {e}") from None
    return str(-(-amount // divisor))


def container_env(pod: Pod, container: Container, facts: PodFacts,
                  allocatable: dict[str, float]) -> list[tuple[str, str]]:
    """(name, value) pairs in order; later entries may refer to earlier ones with $(NAME)."""
    resolved: dict[str, str] = {}
    out: list[tuple[str, str]] = []
    for var in container.env:
        if var.value_from:
            source = var.value_from
            if "fieldRef" in source:
                value = _field_ref(pod, facts, (source["fieldRef"] or {}).get("fieldPath", ""))
            elif "resourceFieldRef" in source:
                value = _resource_ref(pod, container, source["resourceFieldRef"] or {}, allocatable)
            else:
                kinds = ", ".join(source)
                raise ContainerConfigError(f"env {var.name}: valueFrom {kinds} is not supported yet")
        else:
            value = expand(var.value, resolved)
        resolved[var.name] = value
        out.append((var.name, value))
    return out


def expand_command(container: Container, env: list[tuple[str, str]]) -> tuple[list[str], list[str]]:
    values = dict(env)
    return [expand(c, values) for c in container.command], [expand(a, values) for a in container.args]
