"""Pod and container specs turned into CRI configs, as the kubelet's runtime manager builds them."""

from __future__ import annotations

import hashlib
import json

from dataclasses import dataclass, field

from pykubelet.api.pod import Container, Pod
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.runtime import labels, paths
from pykubelet.runtime import cgroups
from pykubelet.runtime.dns import ClusterDNS, dns_config
from pykubelet.runtime.env import EnvSources, PodFacts, container_env, expand_command
from pykubelet.runtime.resources import linux_resources, qos_class
from pykubelet.runtime.security import linux_security, sandbox_privileged
from pykubelet.runtime.swap import SwapFacts


@dataclass(frozen=True)
class NodeFacts:
    """What container configs need to know about the node."""

    node_name: str = ""
    host_ip: str = ""
    memory_capacity: int = 1
    allocatable: dict[str, float] = field(default_factory=dict)
    """cpu (cores) and memory (bytes): what resourceFieldRef reports for an unset limit."""
    dns: ClusterDNS = field(default_factory=ClusterDNS)
    root_dir: str = "/var/lib/kubelet"
    """--root-dir: per-pod directories (volumes) live under <root-dir>/pods/<uid> (runtime/paths.py)."""
    seccomp_root: str = "/var/lib/kubelet/seccomp"
    """<root-dir>/seccomp: where Localhost seccomp profiles live."""
    pod_logs_dir: str = "/var/log/pods"
    """podLogsDir: one directory of container logs per pod (runtime/paths.py)."""
    cgroup_root: str = cgroups.CGROUP_ROOT
    """Where the cgroup hierarchies are mounted (the pod cgroups are made under them)."""
    cgroup_driver: str = cgroups.CGROUPFS
    """cgroupDriver: the pod cgroups' layout (runtime/cgroups.py)."""
    kubepods: str = cgroups.KUBEPODS
    """The pods' cgroup within each hierarchy (cgroups.kubepods_under: --cgroup-root)."""
    swap: SwapFacts | None = None
    """The node's swap (runtime/swap.py); None: containers get no swap setting."""

_PROTOCOLS = {"TCP": api.TCP, "UDP": api.UDP, "SCTP": api.SCTP}


def pod_log_directory(logs_root: str, pod: Pod) -> str:
    return paths.pod_log_dir(logs_root, pod.namespace, pod.name, pod.uid)


def _hash(fields: dict) -> str:
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:8]


RESIZABLE_FIELDS = ("resources", "resizePolicy")
"""What the pods/resize subresource may change on a running container: never a reason to replace it."""


def container_hash(container: Container) -> str:
    """The whole spec's hash, as every container has recorded it (io.kubernetes.container.hash)."""
    return _hash(container.raw)


def container_hash_without_resources(container: Container) -> str:
    """The spec's hash without what a resize changes: a running container whose recorded one
    differs is replaced; a resize is applied in place (pods/resize.py)."""
    return _hash({k: v for k, v in container.raw.items() if k not in RESIZABLE_FIELDS})


def spec_changed(recorded_hash: str, recorded_hash_without_resources: str, container: Container) -> bool:
    """Whether a container created with these recorded hashes no longer matches its spec.

    A container made before the hash without resources existed carries only the whole spec's
    hash: it is compared by that one, so an agent upgrade replaces no container (only a resize
    of such a container replaces it, as the agent that made it would have)."""
    if recorded_hash_without_resources:
        return recorded_hash_without_resources != container_hash_without_resources(container)
    return recorded_hash != container_hash(container)


def _namespace_options(pod: Pod) -> api.NamespaceOption:
    return api.NamespaceOption(
        network=api.NODE if pod.host_network else api.POD,
        # Each container sees only its own processes unless the pod shares one PID namespace.
        pid=api.NODE if pod.host_pid else api.POD if pod.share_process_namespace else api.CONTAINER,
        ipc=api.NODE if pod.host_ipc else api.POD,
    )


def pod_cgroup_parent(pod: Pod, driver: str = cgroups.CGROUPFS, kubepods: str = cgroups.KUBEPODS) -> str:
    """The pod's cgroup in its QoS tier: /kubepods/burstable/pod<uid> (cgroupfs) or
    kubepods-burstable-pod<uid>.slice (systemd), under the cgroupRoot's `kubepods`; Guaranteed
    pods have no tier."""
    return cgroups.pod_cgroup_parent(pod.uid, qos_class(pod), driver, kubepods)


def sandbox_config(pod: Pod, attempt: int, logs_root: str, dns: ClusterDNS | None = None,
                   cgroup_driver: str = cgroups.CGROUPFS, kubepods: str = cgroups.KUBEPODS) -> api.PodSandboxConfig:
    port_mappings = [
        api.PortMapping(protocol=_PROTOCOLS[p.protocol], container_port=p.container_port,
                        host_port=p.host_port, host_ip=p.host_ip)
        for p in pod.host_port_mappings()
    ]
    return api.PodSandboxConfig(
        metadata=api.PodSandboxMetadata(name=pod.name, uid=pod.uid, namespace=pod.namespace, attempt=attempt),
        # Host-network pods keep the node's hostname, as with the kubelet.
        hostname="" if pod.host_network else pod.hostname_and_domain("")[0],
        log_directory=pod_log_directory(logs_root, pod),
        port_mappings=port_mappings,
        dns_config=dns_config(pod, dns or ClusterDNS()),
        labels=labels.pod_labels(pod),
        annotations=pod.annotations,
        linux=api.LinuxPodSandboxConfig(
            cgroup_parent=pod_cgroup_parent(pod, cgroup_driver, kubepods),
            security_context=api.LinuxSandboxSecurityContext(namespace_options=_namespace_options(pod),
                                                             privileged=sandbox_privileged(pod)),
            sysctls=pod.sysctls,
        ),
    )


def container_env_of(pod: Pod, container: Container, node: NodeFacts, pod_ip: str,
                     env_sources: EnvSources | None) -> list[tuple[str, str]]:
    """The container's environment as it will run with it (also what subPathExpr expands with)."""
    return container_env(pod, container, PodFacts(node.node_name, node.host_ip, pod_ip), node.allocatable,
                         env_sources)


def container_config(pod: Pod, container: Container, image_ref: str, restart_count: int,
                     node: NodeFacts | None = None, pod_ip: str = "",
                     mounts: list[api.Mount] | None = None,
                     env_sources: EnvSources | None = None, pid_target_id: str = "") -> api.ContainerConfig:
    """The CreateContainer config; ContainerConfigError when the spec cannot be honoured.

    `env_sources`: the ConfigMaps, Secrets and service variables the env reads (fetched before);
    `pid_target_id`: the runtime ID of the container whose PID namespace an ephemeral container
    with targetContainerName joins.
    """
    node = node or NodeFacts()
    env = container_env_of(pod, container, node, pod_ip, env_sources)
    command, args = expand_command(container, env)
    namespaces = _namespace_options(pod)
    if pid_target_id and namespaces.pid == api.CONTAINER:
        # kubectl debug --target: the debugger sees the target's processes. A pod that shares one
        # PID namespace (or the node's) already lets it, so the target changes nothing there.
        namespaces.pid, namespaces.target_id = api.TARGET, pid_target_id
    return api.ContainerConfig(
        metadata=api.ContainerMetadata(name=container.name, attempt=restart_count),
        image=api.ImageSpec(image=image_ref, user_specified_image=container.image),
        command=command,
        args=args,
        working_dir=container.working_dir,
        envs=[api.KeyValue(key=name, value=value.encode()) for name, value in env],
        mounts=mounts or [],
        labels=labels.container_labels(pod, container),
        annotations=labels.container_annotations(pod, container, container_hash(container),
                                                 container_hash_without_resources(container), restart_count),
        log_path=paths.container_log_path(container.name, restart_count),
        stdin=container.stdin,
        tty=container.tty,
        linux=api.LinuxContainerConfig(
            resources=linux_resources(pod, container, node.memory_capacity, node.swap),
            security_context=linux_security(pod, container, namespaces, seccomp_root=node.seccomp_root),
        ),
    )
