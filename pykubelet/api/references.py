"""Which API objects a Pod refers to: the ConfigMaps and Secrets it reads (volumes, env,
envFrom, imagePullSecrets), and — for static pods — the first reference the kubelet refuses.

Pure functions over the raw pod dict, so the object cache, the volume code and the static
pod source agree on what a pod needs.
"""

from __future__ import annotations

from typing import Any, Iterator

CONFIGMAPS, SECRETS = "configmaps", "secrets"


def _containers(spec: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        for i, container in enumerate(spec.get(kind) or []):
            if isinstance(container, dict):
                yield f"spec.{kind}[{i}]", container


def references(raw: dict[str, Any]) -> Iterator[tuple[str, str, str]]:
    """(resource, name, field path) for every ConfigMap and Secret the pod refers to."""
    spec = raw.get("spec") or {}
    for i, ref in enumerate(spec.get("imagePullSecrets") or []):
        if (ref or {}).get("name"):
            yield SECRETS, ref["name"], f"spec.imagePullSecrets[{i}]"
    for path, container in _containers(spec):
        for j, source in enumerate(container.get("envFrom") or []):
            for key, resource in (("configMapRef", CONFIGMAPS), ("secretRef", SECRETS)):
                if ((source or {}).get(key) or {}).get("name"):
                    yield resource, source[key]["name"], f"{path}.envFrom[{j}].{key}"
        for j, var in enumerate(container.get("env") or []):
            value_from = (var or {}).get("valueFrom") or {}
            for key, resource in (("configMapKeyRef", CONFIGMAPS), ("secretKeyRef", SECRETS)):
                if (value_from.get(key) or {}).get("name"):
                    yield resource, value_from[key]["name"], f"{path}.env[{j}].valueFrom.{key}"
    for i, volume in enumerate(spec.get("volumes") or []):
        volume = volume or {}
        if (volume.get("configMap") or {}).get("name"):
            yield CONFIGMAPS, volume["configMap"]["name"], f"spec.volumes[{i}].configMap"
        if (volume.get("secret") or {}).get("secretName"):
            yield SECRETS, volume["secret"]["secretName"], f"spec.volumes[{i}].secret"
        for j, source in enumerate((volume.get("projected") or {}).get("sources") or []):
            source = source or {}
            if (source.get("configMap") or {}).get("name"):
                yield CONFIGMAPS, source["configMap"]["name"], f"spec.volumes[{i}].projected.sources[{j}].configMap"
            if (source.get("secret") or {}).get("name"):
                yield SECRETS, source["secret"]["name"], f"spec.volumes[{i}].projected.sources[{j}].secret"


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
    spec = raw.get("spec") or {}
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
    for i, volume in enumerate(spec.get("volumes") or []):
        for key, what in _VOLUME_RESOURCES.items():
            if key in (volume or {}):
                return what, f"spec.volumes[{i}].{key}"
        for j, source in enumerate(((volume or {}).get("projected") or {}).get("sources") or []):
            for key, what in _PROJECTED_RESOURCES.items():
                if key in (source or {}):
                    return what, f"spec.volumes[{i}].projected.sources[{j}].{key}"
    return None
