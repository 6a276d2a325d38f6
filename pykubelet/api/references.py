"""Which API objects a Pod refers to: the ConfigMaps and Secrets it reads (volumes, env,
envFrom, imagePullSecrets), and — for static pods — the first reference the kubelet refuses.

Pure functions over the raw pod dict, so the object cache, the volume code and the static
pod source agree on what a pod needs.
"""

from __future__ import annotations

from typing import Any, Iterator

CONFIGMAPS, SECRETS = "configmaps", "secrets"


def _map(value: Any) -> dict[str, Any]:
    """The value if it is an object, else empty: these run before validation, on any input."""
    return value if isinstance(value, dict) else {}


def _seq(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _containers(spec: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        for i, container in enumerate(_seq(spec.get(kind))):
            if isinstance(container, dict):
                yield f"spec.{kind}[{i}]", container


def references(raw: dict[str, Any]) -> Iterator[tuple[str, str, str]]:
    """(resource, name, field path) for every ConfigMap and Secret the pod refers to."""
    spec = _map(raw.get("spec"))
    for i, ref in enumerate(_seq(spec.get("imagePullSecrets"))):
        if name := _map(ref).get("name"):
            yield SECRETS, name, f"spec.imagePullSecrets[{i}]"
    for path, container in _containers(spec):
        for j, source in enumerate(_seq(container.get("envFrom"))):
            for key, resource in (("configMapRef", CONFIGMAPS), ("secretRef", SECRETS)):
                if name := _map(_map(source).get(key)).get("name"):
                    yield resource, name, f"{path}.envFrom[{j}].{key}"
        for j, var in enumerate(_seq(container.get("env"))):
            value_from = _map(_map(var).get("valueFrom"))
            for key, resource in (("configMapKeyRef", CONFIGMAPS), ("secretKeyRef", SECRETS)):
                if name := _map(value_from.get(key)).get("name"):
                    yield resource, name, f"{path}.env[{j}].valueFrom.{key}"
    for i, volume in enumerate(_seq(spec.get("volumes"))):
        volume = _map(volume)
        if name := _map(volume.get("configMap")).get("name"):
            yield CONFIGMAPS, name, f"spec.volumes[{i}].configMap"
        if name := _map(volume.get("secret")).get("secretName"):
            yield SECRETS, name, f"spec.volumes[{i}].secret"
        for j, source in enumerate(_seq(_map(volume.get("projected")).get("sources"))):
            if name := _map(_map(source).get("configMap")).get("name"):
                yield CONFIGMAPS, name, f"spec.volumes[{i}].projected.sources[{j}].configMap"
            if name := _map(_map(source).get("secret")).get("name"):
                yield SECRETS, name, f"spec.volumes[{i}].projected.sources[{j}].secret"


def referenced_names(raw: dict[str, Any]) -> dict[str, set[str]]:
    """resource -> names, for the object cache."""
    out: dict[str, set[str]] = {CONFIGMAPS: set(), SECRETS: set()}
    for resource, name, _ in references(raw):
        out[resource].add(name)
    return out


_VOLUME_RESOURCES = {
    "configMap": "configmaps (via configmap volumes)",
    "secret": "secrets (via secret volumes)",
    "persistentVolumeClaim": "persistentvolumeclaims",
    "ephemeral": "persistentvolumeclaims (via ephemeral volumes)",
    "csi": "csidrivers (via CSI volumes)",
}
_PROJECTED_RESOURCES = {
    "configMap": "configmaps (via projected volumes)",
    "secret": "secrets (via projected volumes)",
    "serviceAccountToken": "serviceaccounts (via projected volumes)",
    "clusterTrustBundle": "clustertrustbundles",
    "podCertificate": "podcertificates",
}


def static_pod_api_reference(raw: dict[str, Any]) -> tuple[str, str] | None:
    """(what, field) of the first API object a static pod refers to, in the kubelet's order.

    The kubelet (PreventStaticPodAPIReferences, on by default since 1.34) refuses such a
    manifest: a static pod must run before, and without, the apiserver.
    """
    spec = _map(raw.get("spec"))
    if spec.get("serviceAccountName"):
        return "serviceaccounts", "spec.serviceAccountName"
    # Like the kubelet, any Secret (then any ConfigMap) reference counts, volumes included.
    found = {resource: path for resource, _, path in reversed(list(references(raw)))}
    if SECRETS in found:
        return SECRETS, found[SECRETS]
    if CONFIGMAPS in found:
        return CONFIGMAPS, found[CONFIGMAPS]
    if spec.get("resourceClaims"):
        return "resourceclaims", "spec.resourceClaims"
    for i, volume in enumerate(_seq(spec.get("volumes"))):
        for key, what in _VOLUME_RESOURCES.items():
            if key in _map(volume):
                return what, f"spec.volumes[{i}].{key}"
        for j, source in enumerate(_seq(_map(_map(volume).get("projected")).get("sources"))):
            for key, what in _PROJECTED_RESOURCES.items():
                if key in _map(source):
                    return what, f"spec.volumes[{i}].projected.sources[{j}].{key}"
    return None
