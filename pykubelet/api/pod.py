"""The part of the Pod API that pykubelet acts on: the typed view the rest of the agent reads.

Parsing and validation from a plain dict are api/pod_parse.py's job. The dict is kept
(`Pod.raw`) because it is what came from the user or the apiserver.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pykubelet.api.probe import LifecycleHandler, Probe


RESTART_POLICIES = ("Always", "OnFailure", "Never")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
PROTOCOLS = ("TCP", "UDP", "SCTP")
DEFAULT_GRACE_SECONDS = 30
DEFAULT_TERMINATION_MESSAGE_PATH = "/dev/termination-log"

CONFIG_SOURCE_ANNOTATION = "kubernetes.io/config.source"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


@dataclass(frozen=True)
class ContainerPort:
    container_port: int
    protocol: str = "TCP"
    host_port: int = 0
    host_ip: str = ""
    name: str = ""


@dataclass(frozen=True)
class EnvVar:
    name: str
    value: str = ""
    value_from: dict[str, Any] | None = field(default=None, compare=False)
    """env[].valueFrom as written (fieldRef, resourceFieldRef, configMapKeyRef, secretKeyRef)."""


@dataclass(frozen=True)
class VolumeMount:
    """containers[].volumeMounts[]."""

    name: str
    mount_path: str
    sub_path: str = ""
    sub_path_expr: str = ""
    """subPathExpr as written: $(VAR) references to the container's env, expanded at start."""
    read_only: bool = False
    mount_propagation: str = ""
    """mountPropagation as written: "" (unset, the same as None), None, HostToContainer or
    Bidirectional (privileged containers only: api/mount_parse.py refuses it on the others)."""


MOUNT_PROPAGATIONS = ("Bidirectional", "HostToContainer", "None")


@dataclass(frozen=True)
class Volume:
    """spec.volumes[]: its name, its type (emptyDir, hostPath, configMap...) and that type's source."""

    name: str
    kind: str
    source: dict[str, Any] = field(default_factory=dict, compare=False)
    """The `<kind>` object as written (emptyDir.medium, hostPath.path, configMap.items...)."""


@dataclass(frozen=True)
class Container:
    name: str
    image: str
    image_pull_policy: str
    cpu_request_millis: int = 0
    memory_request_bytes: int = 0
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: tuple[EnvVar, ...] = ()
    working_dir: str = ""
    ports: tuple[ContainerPort, ...] = ()
    tty: bool = False
    stdin: bool = False
    restart_policy: str = ""
    """Only on init containers: "Always" makes it a sidecar (started in order, kept running)."""
    volume_mounts: tuple[VolumeMount, ...] = ()
    startup_probe: Probe | None = field(default=None, compare=False)
    """Until it succeeds, the container is not started and its other probes do not run."""
    liveness_probe: Probe | None = field(default=None, compare=False)
    readiness_probe: Probe | None = field(default=None, compare=False)
    post_start: LifecycleHandler | None = field(default=None, compare=False)
    """lifecycle.postStart: run right after the container started."""
    pre_stop: Handler | None = field(default=None, compare=False)
    """lifecycle.preStop: run before the container is stopped, inside its grace period."""
    target_container_name: str = ""
    """Only on ephemeral containers (kubectl debug --target): the pod's container whose
    processes it sees; one of its regular or init containers."""
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def is_sidecar(self) -> bool:
        return self.restart_policy == "Always"


@dataclass(frozen=True)
class Pod:
    name: str
    namespace: str
    uid: str
    containers: tuple[Container, ...]
    init_containers: tuple[Container, ...] = ()
    """Run in order before the app containers; sidecars among them keep running."""
    ephemeral_containers: tuple[Container, ...] = ()
    """Added to a running pod (kubectl debug): each started once, never restarted, not probed."""
    restart_policy: str = "Always"
    termination_grace_period_seconds: int = DEFAULT_GRACE_SECONDS
    host_network: bool = False
    node_name: str = ""
    labels: dict[str, str] = field(default_factory=dict, compare=False)
    annotations: dict[str, str] = field(default_factory=dict, compare=False)
    deletion_timestamp: str = ""
    """Set once the apiserver asked for graceful deletion."""
    deletion_grace_period_seconds: int | None = None
    volumes: tuple[Volume, ...] = ()
    fs_group: int | None = None
    """securityContext.fsGroup: owns the pod's volumes."""
    fs_group_change_policy: str = ""
    """securityContext.fsGroupChangePolicy: OnRootMismatch, or Always ("" unset, the same)."""
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def is_static(self) -> bool:
        """A pod from a manifest file (its status goes to a mirror pod)."""
        return self.annotations.get(CONFIG_SOURCE_ANNOTATION) == "file"

    @property
    def is_mirror(self) -> bool:
        """The apiserver's stand-in for a static pod: shown to users, never run."""
        return MIRROR_ANNOTATION in self.annotations

    @property
    def api_phase(self) -> str:
        status = self.raw.get("status")
        return status.get("phase", "") if isinstance(status, dict) else ""

    @property
    def generation(self) -> int:
        """metadata.generation: the apiserver's count of spec changes (0 for a pod it never had, a
        static pod's). The node reports the one it last acted on as status.observedGeneration."""
        value = (self.raw.get("metadata") or {}).get("generation")
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0

    @property
    def full_name(self) -> str:
        """namespace/name, how the kubelet names a pod in its logs."""
        return f"{self.namespace}/{self.name}"

    def host_port_mappings(self) -> list[ContainerPort]:
        return [p for c in self.containers for p in c.ports if p.host_port]

    # Node-local spec fields, read from the validated raw spec (see _check_node_local).
    def _spec(self, key: str, default: Any = None) -> Any:
        return (self.raw.get("spec") or {}).get(key, default)

    @property
    def host_pid(self) -> bool:
        return bool(self._spec("hostPID"))

    @property
    def host_ipc(self) -> bool:
        return bool(self._spec("hostIPC"))

    @property
    def share_process_namespace(self) -> bool:
        return bool(self._spec("shareProcessNamespace"))

    @property
    def sysctls(self) -> dict[str, str]:
        """securityContext.sysctls as name -> value."""
        ctx = self._spec("securityContext") or {}
        return {s["name"]: s.get("value", "") for s in ctx.get("sysctls") or []}

    @property
    def host_aliases(self) -> list[tuple[str, list[str]]]:
        """hostAliases as (ip, hostnames)."""
        return [(a.get("ip", ""), list(a.get("hostnames") or [])) for a in self._spec("hostAliases") or []]

    @property
    def active_deadline_seconds(self) -> int | None:
        """spec.activeDeadlineSeconds: how long the pod may be active on the node."""
        value = self._spec("activeDeadlineSeconds")
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

    def hostname_and_domain(self, cluster_domain: str) -> tuple[str, str]:
        """The pod's hostname (spec.hostname, else its name, cut to 63 characters) and, with a
        subdomain, its domain <subdomain>.<namespace>.svc.<clusterDomain>: the kubelet's rules.
        spec.hostnameOverride, when set, is the hostname (cut the same way), with no domain."""
        if override := self._spec("hostnameOverride"):
            return override[:63].rstrip("-."), ""
        hostname = self._spec("hostname") or self.name[:63].rstrip("-.")
        subdomain = self._spec("subdomain") or ""
        return hostname, f"{subdomain}.{self.namespace}.svc.{cluster_domain}" if subdomain else ""


# Fields pykubelet acts on; the rest of a PodSpec is accepted and reported as not supported yet.
SUPPORTED_POD_FIELDS = frozenset({
    "containers", "initContainers", "restartPolicy", "terminationGracePeriodSeconds", "hostNetwork",
    "nodeName", "dnsPolicy", "dnsConfig", "securityContext", "serviceAccountName", "serviceAccount",
    "schedulerName", "tolerations", "priority", "priorityClassName", "enableServiceLinks", "preemptionPolicy",
    "nodeSelector", "affinity", "automountServiceAccountToken", "terminationMessagePath", "volumes",
    "hostPID", "hostIPC", "shareProcessNamespace", "hostAliases", "hostname", "subdomain",
    "hostnameOverride", "ephemeralContainers", "readinessGates", "activeDeadlineSeconds", "os",
})
NODE_LOCAL_VOLUME_TYPES = ("emptyDir", "hostPath")
SUPPORTED_VOLUME_TYPES = (*NODE_LOCAL_VOLUME_TYPES, "configMap", "secret", "downwardAPI", "projected",
                          "persistentVolumeClaim", "ephemeral",  # claims: hostPath, local and CSI PVs
                          "csi")  # inline CSI volumes, published by their drivers
SUPPORTED_CONTAINER_FIELDS = frozenset({
    "name", "image", "imagePullPolicy", "command", "args", "env", "workingDir", "ports", "tty", "stdin",
    "resources", "securityContext", "livenessProbe", "readinessProbe", "startupProbe", "restartPolicy",
    "terminationMessagePath", "terminationMessagePolicy", "volumeMounts", "envFrom", "lifecycle",
    "volumeDevices",  # block claim volumes (CSI)
})


def unsupported_fields(pod: "Pod") -> list[str]:
    """Paths of the set fields pykubelet does not act on yet (for a warning, not a rejection)."""
    spec = pod.raw.get("spec") or {}
    out = [f"spec.{key}" for key, value in spec.items() if value not in (None, [], {}, False)
           and key not in SUPPORTED_POD_FIELDS]
    out += [f"spec.volumes[{i}].{volume.kind}" for i, volume in enumerate(pod.volumes)
            if volume.kind and volume.kind not in SUPPORTED_VOLUME_TYPES]
    for kind, containers in (("initContainers", pod.init_containers), ("containers", pod.containers),
                             ("ephemeralContainers", pod.ephemeral_containers)):
        for i, container in enumerate(containers):
            out += [f"spec.{kind}[{i}].{key}" for key, value in container.raw.items()
                    if value not in (None, [], {}, False) and key not in SUPPORTED_CONTAINER_FIELDS]
            out += [f"spec.{kind}[{i}].env[{j}].valueFrom" for j, var in enumerate(container.env)
                    if var.value_from and not ({"fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef"}
                                               & var.value_from.keys())]
    return out


def default_pull_policy(image: str) -> str:
    """Always for :latest or untagged images, IfNotPresent otherwise (the API's defaulting)."""
    name, _, digest = image.rsplit("/", 1)[-1].partition("@")
    if ":" in name:
        return "Always" if name.rsplit(":", 1)[1] == "latest" else "IfNotPresent"
    return "IfNotPresent" if digest else "Always"


# Parsing lives in pod_parse.py; `from pykubelet.api.pod import parse_pod` keeps working.
from pykubelet.api.pod_parse import parse_pod  # noqa: E402  (after the model it builds)

__all__ = ["Container", "ContainerPort", "EnvVar", "LifecycleHandler", "Pod", "Probe", "Volume", "VolumeMount", "parse_pod",
           "unsupported_fields"]
