"""Service environment variables, docker-link style, as the kubelet gives every container:

    REDIS_SERVICE_HOST=10.96.0.11     REDIS_SERVICE_PORT=6379    REDIS_SERVICE_PORT_CLIENT=6379
    REDIS_PORT=tcp://10.96.0.11:6379  REDIS_PORT_6379_TCP=tcp://10.96.0.11:6379
    REDIS_PORT_6379_TCP_PROTO=tcp     REDIS_PORT_6379_TCP_PORT=6379   REDIS_PORT_6379_TCP_ADDR=10.96.0.11

for each Service of the pod's namespace with a cluster IP (enableServiceLinks, default true),
and always for the `kubernetes` Service of the default namespace. Pure functions.
"""

from __future__ import annotations

from typing import Any, Iterable

MASTER_NAMESPACE = "default"
MASTER_SERVICES = ("kubernetes",)


def env_name(name: str) -> str:
    return name.upper().replace("-", "_")


def _has_cluster_ip(service: dict[str, Any]) -> bool:
    ip = (service.get("spec") or {}).get("clusterIP") or ""
    return ip not in ("", "None")


def services_for_pod(services: Iterable[dict[str, Any]], namespace: str,
                     enable_service_links: bool) -> list[dict[str, Any]]:
    """The Services whose variables a pod in `namespace` gets (the kubelet's getServiceEnvVarMap)."""
    chosen: dict[str, dict[str, Any]] = {}
    for service in services:
        if not _has_cluster_ip(service):
            continue
        meta = service.get("metadata") or {}
        name, ns = meta.get("name", ""), meta.get("namespace", "")
        if ns == MASTER_NAMESPACE and name in MASTER_SERVICES:
            chosen.setdefault(name, service)
        elif ns == namespace and enable_service_links:
            chosen[name] = service  # the pod's own namespace wins over the master service
    return [chosen[name] for name in sorted(chosen)]


def service_env(services: Iterable[dict[str, Any]]) -> dict[str, str]:
    """The variables of each Service, in order."""
    out: dict[str, str] = {}
    for service in services:
        spec = service.get("spec") or {}
        name = env_name((service.get("metadata") or {}).get("name", ""))
        ip = spec.get("clusterIP", "")
        ports = spec.get("ports") or []
        out[f"{name}_SERVICE_HOST"] = ip
        if ports:
            out[f"{name}_SERVICE_PORT"] = str(ports[0].get("port", ""))
        for port in ports:
            if port.get("name"):
                out[f"{name}_SERVICE_PORT_{env_name(port['name'])}"] = str(port.get("port", ""))
        host = f"[{ip}]" if ":" in ip else ip
        for i, port in enumerate(ports):
            protocol = (port.get("protocol") or "TCP").upper()
            number = str(port.get("port", ""))
            url = f"{protocol.lower()}://{host}:{number}"
            prefix = f"{name}_PORT_{number}_{protocol}"
            if i == 0:
                out[f"{name}_PORT"] = url
            out[prefix] = url
            out[f"{prefix}_PROTO"] = protocol.lower()
            out[f"{prefix}_PORT"] = number
            out[f"{prefix}_ADDR"] = ip
    return out
