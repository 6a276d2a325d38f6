"""What the kubelet API needs from the rest of the agent, as a few narrow callables.

The server never reaches into the pod workers or the status manager: the agent hands it these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from pykubelet.api.pod import Pod
from pykubelet.config import Settings
from pykubelet.cri.client import CRIClient
from pykubelet.server.auth import Review


@dataclass
class Host:
    settings: Settings
    cri: CRIClient
    node_ips: list[str]
    pods: Callable[[], list[tuple[Pod, dict[str, Any]]]]
    """Every pod this node runs, with its current v1 status."""
    health_checks: dict[str, Callable[[], bool]] = field(default_factory=dict)
    """/healthz checks by name (the kubelet's: syncloop, pleg...)."""
    review: Review | None = None
    """POST a TokenReview or SubjectAccessReview to the apiserver; None on a standalone node."""
    volume_stats: Callable[[list[str]], Awaitable[dict[str, list[dict[str, Any]]]]] | None = None
    """Pod UIDs -> the Summary API entries of their volumes measured by a driver (CSI); None when
    no driver can register."""

    @property
    def node_name(self) -> str:
        return self.settings.node_name

    def find_pod(self, namespace: str, name: str, uid: str = "") -> tuple[Pod, dict[str, Any]] | None:
        """The pod by namespace and name (and UID, when the path names one)."""
        for pod, status in self.pods():
            if pod.namespace == namespace and pod.name == name and (not uid or pod.uid == uid):
                return pod, status
        return None


def container_id(value: str) -> str:
    """The runtime's ID in a status's containerID ("containerd://<id>")."""
    return value.split("://", 1)[-1]


def spec_container_names(pod: Pod) -> set[str]:
    spec = pod.raw.get("spec") or {}
    return {c.get("name") for key in ("containers", "initContainers", "ephemeralContainers")
            for c in spec.get(key) or []}


def container_status(status: dict[str, Any], name: str) -> dict[str, Any] | None:
    for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
        for cs in status.get(key) or []:
            if cs.get("name") == name:
                return cs
    return None
