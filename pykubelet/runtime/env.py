"""A container's environment as the kubelet builds it: envFrom, value, valueFrom (fieldRef,
resourceFieldRef, configMapKeyRef, secretKeyRef), service links, and $(VAR) expansion in env
values, command and args."""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from typing import Any

from pykubelet.api.pod import Container, Pod
from pykubelet.api.quantity import cpu_millis, quantity_bytes
from pykubelet.runtime.resources import requests_and_limits


class ContainerConfigError(ValueError):
    """The container cannot be configured (CreateContainerConfigError); the message says why."""


@dataclass(frozen=True)
class PodFacts:
    """What fieldRef can point at that the spec does not hold."""

    node_name: str
    host_ip: str
    pod_ip: str


@dataclass
class EnvSources:
    """The API objects a container's env reads, fetched before the (pure) env is built."""

    config_maps: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    """name -> ConfigMap; None: it does not exist."""
    secrets: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    services: dict[str, str] = field(default_factory=dict)
    """Service link variables (FOO_SERVICE_HOST...), below every variable the pod sets."""
    has_api: bool = False
    """Whether there is an apiserver at all; without one a reference cannot be resolved."""

    def lookup(self, kind: str, namespace: str, name: str, optional: bool) -> dict[str, str] | None:
        """The object's data as text (None: missing and optional); ContainerConfigError otherwise."""
        known = self.config_maps if kind == "configMap" else self.secrets
        if name not in known:
            raise ContainerConfigError(f"couldn't get {kind} {namespace}/{name}, no kubeClient defined")
        obj = known[name]
        if obj is None:
            if optional:
                return None
            raise ContainerConfigError(f'{kind.lower()} "{name}" not found')
        if kind == "configMap":
            return dict(obj.get("data") or {})
        return {k: base64.b64decode(v or "").decode(errors="replace") for k, v in (obj.get("data") or {}).items()}


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


def expand_required(text: str, env: dict[str, str]) -> str:
    """$(VAR) expansion where every variable named must be set and not empty (subPathExpr's
    rule: an unset one would silently change which directory is mounted)."""
    missing = sorted({m.group(1) for m in _REFERENCE.finditer(text) if m.group(0) != "$$" and not env.get(m.group(1))})
    if missing:
        raise ContainerConfigError(f"missing value for {', '.join(missing)}")
    return expand(text, env)


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
    requests, limits = requests_and_limits(target)
    raw = (requests if kind == "requests" else limits).get(name)
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


def resource_field_value(pod: Pod, ref: dict[str, Any], allocatable: dict[str, float]) -> str:
    """A downwardAPI volume's resourceFieldRef (containerName is required there)."""
    container = pod.containers[0] if pod.containers else None
    return _resource_ref(pod, container, ref, allocatable)  # type: ignore[arg-type]


def _env_from(pod: Pod, container: Container, sources: EnvSources, env: dict[str, str]) -> None:
    # Every key, prefixed: the API validates prefixes and keys, so the kubelet no longer checks names.
    for source in container.raw.get("envFrom") or []:
        prefix = source.get("prefix") or ""
        for key, kind in (("configMapRef", "configMap"), ("secretRef", "secret")):
            ref = source.get(key)
            if ref:
                data = sources.lookup(kind, pod.namespace, ref.get("name", ""), bool(ref.get("optional")))
                env.update((prefix + name, value) for name, value in (data or {}).items())


def _key_ref(pod: Pod, kind: str, ref: dict[str, Any], sources: EnvSources) -> str | None:
    optional = bool(ref.get("optional"))
    name, key = ref.get("name", ""), ref.get("key", "")
    data = sources.lookup(kind, pod.namespace, name, optional)
    if data is None:
        return None
    if key not in data:
        if optional:
            return None
        what = "ConfigMap" if kind == "configMap" else "Secret"
        raise ContainerConfigError(f"couldn't find key {key} in {what} {pod.namespace}/{name}")
    return data[key]


def container_env(pod: Pod, container: Container, facts: PodFacts,
                  allocatable: dict[str, float], sources: EnvSources | None = None) -> list[tuple[str, str]]:
    """(name, value) pairs: envFrom, then env in order (later entries may refer to earlier ones
    and to service variables with $(NAME)), then the service variables the pod does not set."""
    sources = sources or EnvSources()
    resolved: dict[str, str] = {}
    _env_from(pod, container, sources, resolved)
    for var in container.env:
        if var.value_from:
            source = var.value_from
            if "fieldRef" in source:
                value = _field_ref(pod, facts, (source["fieldRef"] or {}).get("fieldPath", ""))
            elif "resourceFieldRef" in source:
                value = _resource_ref(pod, container, source["resourceFieldRef"] or {}, allocatable)
            elif "configMapKeyRef" in source or "secretKeyRef" in source:
                kind = "configMap" if "configMapKeyRef" in source else "secret"
                found = _key_ref(pod, kind, source.get(f"{kind}KeyRef") or {}, sources)
                if found is None:
                    continue  # optional and missing: the variable is not set
                value = found
            else:
                kinds = ", ".join(source)
                raise ContainerConfigError(f"env {var.name}: valueFrom {kinds} is not supported yet")
        else:
            value = expand(var.value, {**sources.services, **resolved})
        resolved[var.name] = value
    out = list(resolved.items())
    out += [(name, value) for name, value in sources.services.items() if name not in resolved]
    return out


def expand_command(container: Container, env: list[tuple[str, str]]) -> tuple[list[str], list[str]]:
    values = dict(env)
    return [expand(c, values) for c in container.command], [expand(a, values) for a in container.args]
