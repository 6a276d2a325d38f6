"""The part of the Pod API that pykubelet acts on, parsed and validated from a plain dict.

The dict is kept (`Pod.raw`) because it is what came from the user or the apiserver;
the dataclasses are the typed view the rest of the agent reads.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from dataclasses import dataclass, field
from typing import Any

from pykubelet.api.errors import FieldError, InvalidObject
from pykubelet.api.quantity import cpu_millis, quantity_bytes

RESTART_POLICIES = ("Always", "OnFailure", "Never")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
PROTOCOLS = ("TCP", "UDP", "SCTP")
DEFAULT_GRACE_SECONDS = 30

CONFIG_SOURCE_ANNOTATION = "kubernetes.io/config.source"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")


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
    restart_policy: str = "Always"
    termination_grace_period_seconds: int = DEFAULT_GRACE_SECONDS
    host_network: bool = False
    node_name: str = ""
    labels: dict[str, str] = field(default_factory=dict, compare=False)
    annotations: dict[str, str] = field(default_factory=dict, compare=False)
    deletion_timestamp: str = ""
    """Set once the apiserver asked for graceful deletion."""
    deletion_grace_period_seconds: int | None = None
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

    def hostname_and_domain(self, cluster_domain: str) -> tuple[str, str]:
        """The pod's hostname (spec.hostname, else its name, cut to 63 characters) and, with a
        subdomain, its domain <subdomain>.<namespace>.svc.<clusterDomain>: the kubelet's rules."""
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
})
NODE_LOCAL_VOLUME_TYPES = ("emptyDir", "hostPath")
SUPPORTED_VOLUME_TYPES = (*NODE_LOCAL_VOLUME_TYPES, "configMap", "secret", "downwardAPI", "projected")
SUPPORTED_CONTAINER_FIELDS = frozenset({
    "name", "image", "imagePullPolicy", "command", "args", "env", "workingDir", "ports", "tty", "stdin",
    "resources", "securityContext", "livenessProbe", "readinessProbe", "startupProbe", "restartPolicy",
    "terminationMessagePath", "terminationMessagePolicy", "volumeMounts", "envFrom", "lifecycle",
})


def unsupported_fields(pod: "Pod") -> list[str]:
    """Paths of the set fields pykubelet does not act on yet (for a warning, not a rejection)."""
    spec = pod.raw.get("spec") or {}
    out = [f"spec.{key}" for key, value in spec.items() if value not in (None, [], {}, False)
           and key not in SUPPORTED_POD_FIELDS]
    for i, volume in enumerate(spec.get("volumes") or []):
        kinds = [k for k in volume if k != "name"]
        out += [f"spec.volumes[{i}].{k}" for k in kinds if k not in SUPPORTED_VOLUME_TYPES]
    for kind, containers in (("initContainers", pod.init_containers), ("containers", pod.containers)):
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


class _Reader:
    """Collects every field error of one object instead of stopping at the first."""

    def __init__(self) -> None:
        self.errors: list[FieldError] = []

    def fail(self, path: str, detail: str) -> None:
        self.errors.append(FieldError(path, detail))

    def mapping(self, value: Any, path: str) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.fail(path, f"must be an object, got {type(value).__name__}")
            return {}
        return value

    def items(self, value: Any, path: str) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            self.fail(path, f"must be a list, got {type(value).__name__}")
            return []
        return value

    def string(self, obj: dict[str, Any], key: str, path: str, required: bool = False) -> str:
        value = obj.get(key)
        if value is None or value == "":
            if required:
                self.fail(f"{path}.{key}" if path else key, "Required value")
            return ""
        if not isinstance(value, str):
            self.fail(f"{path}.{key}" if path else key, f"must be a string, got {value!r}")
            return ""
        return value

    def strings(self, obj: dict[str, Any], key: str, path: str) -> tuple[str, ...]:
        values = self.items(obj.get(key), f"{path}.{key}")
        out = []
        for i, value in enumerate(values):
            if not isinstance(value, str):
                self.fail(f"{path}.{key}[{i}]", f"must be a string, got {value!r}")
            else:
                out.append(value)
        return tuple(out)

    def integer(self, obj: dict[str, Any], key: str, path: str, default: int, low: int, high: int) -> int:
        value = obj.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(f"{path}.{key}", f"must be an integer, got {value!r}")
            return default
        if not low <= value <= high:
            self.fail(f"{path}.{key}", f"Invalid value: {value}: must be between {low} and {high}, inclusive")
            return default
        return value

    def boolean(self, obj: dict[str, Any], key: str, path: str) -> bool:
        value = obj.get(key, False)
        if not isinstance(value, bool):
            self.fail(f"{path}.{key}", f"must be true or false, got {value!r}")
            return False
        return value

    def choice(self, obj: dict[str, Any], key: str, path: str, allowed: tuple[str, ...], default: str) -> str:
        value = obj.get(key)
        if value is None or value == "":
            return default
        if value not in allowed:
            supported = ", ".join(f'"{a}"' for a in allowed)
            self.fail(f"{path}.{key}", f'Unsupported value: {value!r}: supported values: {supported}')
            return default
        return value

    def string_map(self, obj: dict[str, Any], key: str, path: str) -> dict[str, str]:
        values = self.mapping(obj.get(key), f"{path}.{key}")
        out = {}
        for k, v in values.items():
            if not isinstance(v, str):
                self.fail(f"{path}.{key}[{k}]", f"must be a string, got {v!r}")
            else:
                out[str(k)] = v
        return out


def _parse_port(r: _Reader, raw: Any, path: str) -> ContainerPort | None:
    obj = r.mapping(raw, path)
    if not obj:
        return None
    if "containerPort" not in obj:
        r.fail(f"{path}.containerPort", "Required value")
    return ContainerPort(
        container_port=r.integer(obj, "containerPort", path, 0, 1, 65535),
        protocol=r.choice(obj, "protocol", path, PROTOCOLS, "TCP"),
        host_port=r.integer(obj, "hostPort", path, 0, 0, 65535),
        host_ip=r.string(obj, "hostIP", path),
        name=r.string(obj, "name", path),
    )


def _requests(r: _Reader, container: dict[str, Any], path: str) -> tuple[int, int]:
    """(cpu millicores, memory bytes) requested; limits stand in for missing requests, as in the API."""
    resources = r.mapping(container.get("resources"), f"{path}.resources")
    out = []
    for key, parse in (("cpu", cpu_millis), ("memory", quantity_bytes)):
        value = r.mapping(resources.get("requests"), f"{path}.resources.requests").get(key)
        if value is None:
            value = r.mapping(resources.get("limits"), f"{path}.resources.limits").get(key)
        try:
            out.append(parse(value) if value is not None else 0)
        except ValueError:
            r.fail(f"{path}.resources.requests.{key}", f"Invalid value: {value!r}: must be a quantity")
            out.append(0)
    return out[0], out[1]


def _parse_container(r: _Reader, raw: Any, path: str, host_network: bool = False,
                     init: bool = False) -> Container | None:
    obj = r.mapping(raw, path)
    if not obj:
        r.fail(path, "must be a container object")
        return None
    name = r.string(obj, "name", path, required=True)
    if name and not _DNS1123_LABEL.match(name):
        r.fail(f"{path}.name", f"Invalid value: {name!r}: must be a lowercase RFC 1123 label")
    image = r.string(obj, "image", path, required=True)
    env = []
    for i, item in enumerate(r.items(obj.get("env"), f"{path}.env")):
        entry = r.mapping(item, f"{path}.env[{i}]")
        env_name = r.string(entry, "name", f"{path}.env[{i}]", required=True)
        if env_name and not _ENV_NAME.match(env_name):
            r.fail(f"{path}.env[{i}].name", f"Invalid value: {env_name!r}: must be a C identifier-like name")
        value_from = entry.get("valueFrom")
        if value_from is not None and not isinstance(value_from, dict):
            r.fail(f"{path}.env[{i}].valueFrom", "must be an object")
            value_from = None
        env.append(EnvVar(env_name, r.string(entry, "value", f"{path}.env[{i}]"), value_from))
    ports = [_parse_port(r, p, f"{path}.ports[{i}]") for i, p in enumerate(r.items(obj.get("ports"), f"{path}.ports"))]
    if host_network:  # the API's defaulting: a host-network pod holds its container ports on the node
        ports = [dataclasses.replace(p, host_port=p.host_port or p.container_port) if p else p for p in ports]
    requests = _requests(r, obj, path)
    return Container(
        name=name,
        image=image,
        image_pull_policy=r.choice(obj, "imagePullPolicy", path, PULL_POLICIES, default_pull_policy(image)),
        cpu_request_millis=requests[0],
        memory_request_bytes=requests[1],
        command=r.strings(obj, "command", path),
        args=r.strings(obj, "args", path),
        env=tuple(env),
        working_dir=r.string(obj, "workingDir", path),
        ports=tuple(p for p in ports if p),
        tty=r.boolean(obj, "tty", path),
        stdin=r.boolean(obj, "stdin", path),
        restart_policy=r.choice(obj, "restartPolicy", path, ("Always",), "") if init else "",
        raw=obj,
    )


ANNOTATIONS_LIMIT_BYTES = 256 * 1024  # the apiserver's limit on all of an object's annotations together


def parse_pod(raw: Any, where: str) -> Pod:
    """A validated Pod from a decoded manifest or API object; InvalidObject names every bad field."""
    r = _Reader()
    if not isinstance(raw, dict):
        raise InvalidObject(where, "Pod", "", [FieldError("(root)", "must be an object (a Pod manifest)")])
    name = ""
    meta = r.mapping(raw.get("metadata"), "metadata")
    if raw.get("kind") not in (None, "Pod"):
        r.fail("kind", f"Unsupported value: {raw.get('kind')!r}: must be \"Pod\"")
    if raw.get("apiVersion") not in (None, "v1"):
        r.fail("apiVersion", f"Unsupported value: {raw.get('apiVersion')!r}: must be \"v1\"")
    name = r.string(meta, "name", "metadata", required=True)
    if name and (len(name) > 253 or not _DNS1123_SUBDOMAIN.match(name)):
        r.fail("metadata.name", f"Invalid value: {name!r}: must be a lowercase RFC 1123 subdomain")
    namespace = r.string(meta, "namespace", "metadata") or "default"
    if not _DNS1123_LABEL.match(namespace):
        r.fail("metadata.namespace", f"Invalid value: {namespace!r}: must be a lowercase RFC 1123 label")
    spec = r.mapping(raw.get("spec"), "spec")
    raw_containers = r.items(spec.get("containers"), "spec.containers")
    if not raw_containers and "spec.containers" not in {e.path for e in r.errors}:
        r.fail("spec.containers", "Required value")
    host_network = r.boolean(spec, "hostNetwork", "spec")
    containers = [_parse_container(r, c, f"spec.containers[{i}]", host_network) for i, c in enumerate(raw_containers)]
    init_containers = [_parse_container(r, c, f"spec.initContainers[{i}]", host_network, init=True)
                       for i, c in enumerate(r.items(spec.get("initContainers"), "spec.initContainers"))]
    seen: set[str] = set()
    for kind, group in (("initContainers", init_containers), ("containers", containers)):
        for i, c in enumerate(group):
            if c and c.name in seen:
                r.fail(f"spec.{kind}[{i}].name", f"Duplicate value: {c.name!r}")
            if c:
                seen.add(c.name)
    pod = Pod(
        name=name,
        namespace=namespace,
        uid=r.string(meta, "uid", "metadata"),
        containers=tuple(c for c in containers if c),
        init_containers=tuple(c for c in init_containers if c),
        restart_policy=r.choice(spec, "restartPolicy", "spec", RESTART_POLICIES, "Always"),
        termination_grace_period_seconds=r.integer(
            spec, "terminationGracePeriodSeconds", "spec", DEFAULT_GRACE_SECONDS, 0, 2**31 - 1),
        host_network=host_network,
        node_name=r.string(spec, "nodeName", "spec"),
        labels=r.string_map(meta, "labels", "metadata"),
        annotations=r.string_map(meta, "annotations", "metadata"),
        deletion_timestamp=r.string(meta, "deletionTimestamp", "metadata"),
        deletion_grace_period_seconds=meta.get("deletionGracePeriodSeconds"),
        raw=raw,
    )
    if sum(len(k) + len(v) for k, v in pod.annotations.items()) > ANNOTATIONS_LIMIT_BYTES:
        r.fail("metadata.annotations", f"Too long: must have at most {ANNOTATIONS_LIMIT_BYTES} bytes")
    raw_inits = spec.get("initContainers")
    _check_node_local(r, spec, raw_containers, raw_inits if isinstance(raw_inits, list) else [])
    if r.errors:
        raise InvalidObject(where, "Pod", name, r.errors)
    return pod


TERMINATION_MESSAGE_POLICIES = ("File", "FallbackToLogsOnError")
_HANDLERS = ("exec", "httpGet", "tcpSocket", "sleep")
_SYSCTL_NAME = re.compile(r"^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?$")


def _check_node_local(r: _Reader, spec: dict[str, Any], containers: list[Any], init_containers: list[Any]) -> None:
    """Validation of the node-local fields (namespaces, sysctls, hostAliases, hostname,
    termination messages, lifecycle hooks) that the Pod properties above read."""
    for key in ("hostPID", "hostIPC", "shareProcessNamespace"):
        r.boolean(spec, key, "spec")
    if spec.get("hostPID") and spec.get("shareProcessNamespace"):
        r.fail("spec.shareProcessNamespace", "Invalid value: true: ShareProcessNamespace and HostPID cannot both be enabled")
    for key in ("hostname", "subdomain"):
        value = r.string(spec, key, "spec")
        if value and not _DNS1123_LABEL.match(value):
            r.fail(f"spec.{key}", f"Invalid value: {value!r}: must be a lowercase RFC 1123 label")
    ctx = r.mapping(spec.get("securityContext"), "spec.securityContext")
    for i, item in enumerate(r.items(ctx.get("sysctls"), "spec.securityContext.sysctls")):
        path = f"spec.securityContext.sysctls[{i}]"
        entry = r.mapping(item, path)
        sysctl = r.string(entry, "name", path, required=True)
        if sysctl and (len(sysctl) > 253 or not _SYSCTL_NAME.match(sysctl)):
            r.fail(f"{path}.name", f"Invalid value: {sysctl!r}: must have at most 253 characters and match "
                                   f"regex {_SYSCTL_NAME.pattern}")
        r.string(entry, "value", path)
    for i, item in enumerate(r.items(spec.get("hostAliases"), "spec.hostAliases")):
        path = f"spec.hostAliases[{i}]"
        alias = r.mapping(item, path)
        ip = r.string(alias, "ip", path, required=True)
        try:
            if ip:
                ipaddress.ip_address(ip)
        except ValueError:
            r.fail(f"{path}.ip", f"Invalid value: {ip!r}: must be a valid IP address")
        for j, hostname in enumerate(r.strings(alias, "hostnames", path)):
            if not _DNS1123_SUBDOMAIN.match(hostname):
                r.fail(f"{path}.hostnames[{j}]", f"Invalid value: {hostname!r}: must be a lowercase RFC 1123 subdomain")
    for kind, group in (("containers", containers), ("initContainers", init_containers)):
        for i, container in enumerate(group):
            if not isinstance(container, dict):
                continue
            path = f"spec.{kind}[{i}]"
            r.choice(container, "terminationMessagePolicy", path, TERMINATION_MESSAGE_POLICIES, "File")
            message_path = r.string(container, "terminationMessagePath", path)
            if message_path and not message_path.startswith("/"):
                r.fail(f"{path}.terminationMessagePath", f"Invalid value: {message_path!r}: must be an absolute path")
            lifecycle = r.mapping(container.get("lifecycle"), f"{path}.lifecycle")
            for hook in ("postStart", "preStop"):
                handler = r.mapping(lifecycle.get(hook), f"{path}.lifecycle.{hook}")
                kinds = [k for k in _HANDLERS if handler.get(k) is not None]
                if handler and len(kinds) != 1:
                    r.fail(f"{path}.lifecycle.{hook}", "must specify exactly one handler type "
                                                       "(exec, httpGet, tcpSocket or sleep)")
                if "sleep" in kinds:
                    r.integer(r.mapping(handler["sleep"], f"{path}.lifecycle.{hook}.sleep"), "seconds",
                              f"{path}.lifecycle.{hook}.sleep", 0, 0, 2**31 - 1)
