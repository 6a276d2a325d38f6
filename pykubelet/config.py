"""Settings from kubelet-compatible flags and a KubeletConfiguration file.

Precedence is the kubelet's: built-in defaults < the --config file < command-line flags.
Invalid values raise ConfigError naming the flag or the file and field (the CLI exits 2).
Kubelet flags and fields that pykubelet does not implement yet are accepted with a warning.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import socket
from dataclasses import dataclass, field
from typing import Any, Callable

import yaml

from pykubelet.api.eviction import DEFAULT_EVICTION_HARD, Threshold, parse_thresholds
from pykubelet.api.sysctls import SysctlAllowlist
from pykubelet.util.durations import parse_duration
from pykubelet.util.log import get_logger

log = get_logger(__name__)

CONFIG_API_VERSION = "kubelet.config.k8s.io/v1beta1"
CONFIG_KIND = "KubeletConfiguration"


class ConfigError(ValueError):
    """A setting that cannot be used; the message names where it came from."""


@dataclass
class RuntimeSettings:
    """How to reach the container runtime over CRI."""

    endpoint: str = "unix:///run/containerd/containerd.sock"
    """containerRuntimeEndpoint / --container-runtime-endpoint."""
    image_endpoint: str = ""
    """imageServiceEndpoint; empty means the runtime endpoint."""
    request_timeout: float = 120.0
    """runtimeRequestTimeout, seconds (default 2m): the deadline of slow CRI calls such as PullImage."""


@dataclass
class PodSettings:
    """Where pods come from and how often they are looked at."""

    static_pod_path: str = ""
    """staticPodPath / --pod-manifest-path: a directory (or one file) of Pod manifests; empty: none."""
    file_check_frequency: float = 20.0
    """fileCheckFrequency, seconds (default 20s): full rescan of the manifests, besides inotify."""
    sync_frequency: float = 60.0
    """syncFrequency, seconds (default 1m): the longest a pod goes without a sync."""
    max_pods: int = 110
    """maxPods: pods this node runs at most; more are rejected."""
    pod_logs_dir: str = "/var/log/pods"
    """podLogsDir: where container logs are written, one directory per pod."""
    allowed_unsafe_sysctls: list[str] = field(default_factory=list)
    """allowedUnsafeSysctls / --allowed-unsafe-sysctls: sysctls (or `prefix*`) pods may set besides
    the safe ones; each must be namespaced (kernel.shm*, kernel.msg*, kernel.sem, fs.mqueue.*, net.*)."""


@dataclass
class ServerSettings:
    """Local HTTP endpoints."""

    healthz_bind_address: str = "127.0.0.1"
    """healthzBindAddress: where /healthz and pykubelet's local /pods listen."""
    healthz_port: int = 10248
    """healthzPort; 0 disables the endpoint."""


@dataclass
class ClusterSettings:
    """Joining a cluster: without a kubeconfig the agent runs standalone (static pods only)."""

    kubeconfig: str = ""
    """--kubeconfig: credentials for the apiserver; empty: standalone."""
    node_ip: str = ""
    """--node-ip: the node's InternalIP; empty: the address of the default route's interface."""
    node_labels: dict[str, str] = field(default_factory=dict)
    """--node-labels: extra labels for the Node, key=value,..."""
    register_node: bool = True
    """registerNode / --register-node: create the Node object."""
    status_update_seconds: float = 10.0
    """nodeStatusUpdateFrequency (default 10s): how often node status is computed."""
    status_report_seconds: float = 300.0
    """nodeStatusReportFrequency (default 5m): node status is written at least this often."""
    lease_duration_seconds: int = 40
    """nodeLeaseDurationSeconds (default 40): renewed every quarter of it."""
    api_qps: float = 50.0
    """kubeAPIQPS (default 50): sustained apiserver requests per second."""
    api_burst: int = 100
    """kubeAPIBurst (default 100): requests allowed in a burst."""
    eviction_hard: dict[str, Threshold] = field(default_factory=lambda: parse_thresholds(DEFAULT_EVICTION_HARD))
    """evictionHard: signal -> threshold; crossing one reports a pressure condition."""
    cluster_dns: list[str] = field(default_factory=list)
    """clusterDNS / --cluster-dns: nameservers for ClusterFirst pods; empty: they get the host's."""
    cluster_domain: str = "cluster.local"
    """clusterDomain / --cluster-domain: the DNS domain ClusterFirst pods search."""
    resolv_conf: str = "/etc/resolv.conf"
    """resolvConf: the host resolver file that dnsPolicy Default copies."""


NETWORK_MODES = ("agent", "runtime")
STANDALONE_POD_CIDR = "10.88.0.0/16"  # containerd's own default pod range


@dataclass
class NetworkSettings:
    """The pod network (README: "The pod network"). Modes:
    agent: the agent runs CNI (through its shim) and routes to other nodes' podCIDRs;
    runtime: containerd runs the CNI config in cni_conf_dir (a CNI DaemonSet's, or ours
    when write_runtime_config)."""

    mode: str = "agent"
    """--network-mode: agent or runtime."""
    pod_cidr: str = ""
    """podCIDR / --pod-cidr: standalone only (default 10.88.0.0/16); in a cluster Node.spec.podCIDR wins."""
    write_runtime_config: bool = False
    """--cni-write-config (runtime mode): write the bridge conflist for containerd from the podCIDR
    and route to other nodes, for clusters without a CNI DaemonSet."""
    cni_bin_dirs: list[str] = field(default_factory=lambda: ["/opt/cni/bin", "/usr/lib/cni"])
    """--cni-bin-dir: where the CNI plugins are (searched in order); the shim is installed into each."""
    cni_conf_dir: str = "/etc/cni/net.d"
    """--cni-conf-dir: containerd's CNI config dir, where the agent writes 10-pykubelet.conflist."""
    socket: str = "/run/pykubelet/cni.sock"
    """--cni-socket (agent mode): where the agent answers its CNI shim."""
    bridge: str = "pkl0"
    """--cni-bridge: the node's pod bridge."""
    host_netns: str = ""
    """--host-netns: a network namespace (name or path) that plays this node's host network;
    empty: the agent's own. For several nodes on one machine (tests, demos)."""


@dataclass
class Settings:
    node_name: str = ""
    """--hostname-override, else the host name lowercased, as the kubelet does."""
    root_dir: str = "/var/lib/kubelet"
    """--root-dir: the agent's state (per-pod directories, checkpoints)."""
    verbosity: int = 0
    """--v: 0 logs info; 4 and up log debug."""
    runtime: RuntimeSettings = field(default_factory=RuntimeSettings)
    pods: PodSettings = field(default_factory=PodSettings)
    server: ServerSettings = field(default_factory=ServerSettings)
    cluster: ClusterSettings = field(default_factory=ClusterSettings)
    network: NetworkSettings = field(default_factory=NetworkSettings)


def _positive_duration(value: Any) -> float:
    seconds = parse_duration(value)
    if seconds <= 0:
        raise ValueError(f"must be a positive duration, got {value!r}")
    return seconds


def _port(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
        raise ValueError(f"must be a port number between 0 and 65535, got {value!r}")
    return value


def _positive_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"must be a positive integer, got {value!r}")
    return value


def _endpoint(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"must be an endpoint like unix:///run/containerd/containerd.sock, got {value!r}")
    if "://" not in value:
        # The kubelet still accepts a bare socket path, with a deprecation warning.
        log.warning("Using a bare path as a CRI endpoint is deprecated; prefix it with unix://", endpoint=value)
        value = "unix://" + value
    if not value.startswith("unix://"):
        raise ValueError(f"only unix:// endpoints are supported, got {value!r}")
    return value


def _positive_number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"must be a positive number, got {value!r}")
    return float(value)


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ValueError(f"must be true or false, got {value!r}")


def _thresholds(value: Any) -> dict[str, Threshold]:
    if not isinstance(value, dict):
        raise ValueError(f"must be a map of signal to threshold, got {value!r}")
    return parse_thresholds(value)


def _labels(value: Any) -> dict[str, str]:
    """key=value,key2=value2 (flag) or a map (not a config field, but the same rules)."""
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()}
    out = {}
    for item in filter(None, str(value).split(",")):
        key, sep, val = item.partition("=")
        if not sep or not key:
            raise ValueError(f"invalid label {item!r}: want key=value")
        out[key.strip()] = val.strip()
    return out


def _ip_list(value: Any) -> list[str]:
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(i, str) and i.strip() for i in items):
        raise ValueError(f"must be a list of IP addresses, got {value!r}")
    return [i.strip() for i in items]


def _network_mode(value: Any) -> str:
    if value not in NETWORK_MODES:
        raise ValueError(f"must be one of {', '.join(NETWORK_MODES)}, got {value!r}")
    return value


def _cidr(value: Any) -> str:
    try:
        return str(ipaddress.ip_network(value, strict=True))
    except (TypeError, ValueError) as e:
        raise ValueError(f"must be a CIDR like 10.244.0.0/24, got {value!r} ({e})") from None


def _path_list(value: Any) -> list[str]:
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(isinstance(i, str) and i.strip() for i in items):
        raise ValueError(f"must be a comma-separated list of directories, got {value!r}")
    return [i.strip() for i in items]


def _interface_name(value: Any) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= 15 or "/" in value or " " in value:
        raise ValueError(f"must be an interface name of 1 to 15 characters, got {value!r}")
    return value


def _sysctl_patterns(value: Any) -> list[str]:
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(i, str) and i.strip() for i in items):
        raise ValueError(f"must be a list of sysctl names or patterns, got {value!r}")
    patterns = [i.strip() for i in items]
    SysctlAllowlist.build(patterns, kernel=())  # ValueError for one that is not namespaced
    return patterns


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"must be a string, got {value!r}")
    return value


# KubeletConfiguration field -> (parser, setter). One table serves the file and the flags.
_Setter = Callable[[Settings, Any], None]
_FIELDS: dict[str, tuple[Callable[[Any], Any], _Setter]] = {
    "staticPodPath": (_text, lambda s, v: setattr(s.pods, "static_pod_path", v)),
    "fileCheckFrequency": (_positive_duration, lambda s, v: setattr(s.pods, "file_check_frequency", v)),
    "syncFrequency": (_positive_duration, lambda s, v: setattr(s.pods, "sync_frequency", v)),
    "maxPods": (_positive_int, lambda s, v: setattr(s.pods, "max_pods", v)),
    "podLogsDir": (_text, lambda s, v: setattr(s.pods, "pod_logs_dir", v)),
    "allowedUnsafeSysctls": (_sysctl_patterns, lambda s, v: setattr(s.pods, "allowed_unsafe_sysctls", v)),
    "containerRuntimeEndpoint": (_endpoint, lambda s, v: setattr(s.runtime, "endpoint", v)),
    "imageServiceEndpoint": (_endpoint, lambda s, v: setattr(s.runtime, "image_endpoint", v)),
    "runtimeRequestTimeout": (_positive_duration, lambda s, v: setattr(s.runtime, "request_timeout", v)),
    "healthzBindAddress": (_text, lambda s, v: setattr(s.server, "healthz_bind_address", v)),
    "healthzPort": (_port, lambda s, v: setattr(s.server, "healthz_port", v)),
    "registerNode": (_boolean, lambda s, v: setattr(s.cluster, "register_node", v)),
    "nodeStatusUpdateFrequency": (_positive_duration, lambda s, v: setattr(s.cluster, "status_update_seconds", v)),
    "nodeStatusReportFrequency": (_positive_duration, lambda s, v: setattr(s.cluster, "status_report_seconds", v)),
    "nodeLeaseDurationSeconds": (_positive_int, lambda s, v: setattr(s.cluster, "lease_duration_seconds", v)),
    "kubeAPIQPS": (_positive_number, lambda s, v: setattr(s.cluster, "api_qps", v)),
    "kubeAPIBurst": (_positive_int, lambda s, v: setattr(s.cluster, "api_burst", v)),
    "evictionHard": (_thresholds, lambda s, v: setattr(s.cluster, "eviction_hard", v)),
    "clusterDNS": (_ip_list, lambda s, v: setattr(s.cluster, "cluster_dns", v)),
    "clusterDomain": (_text, lambda s, v: setattr(s.cluster, "cluster_domain", v)),
    "resolvConf": (_text, lambda s, v: setattr(s.cluster, "resolv_conf", v)),
    "podCIDR": (_cidr, lambda s, v: setattr(s.network, "pod_cidr", v)),
    # Flag-only settings share the table under their flag's name.
    "--kubeconfig": (_text, lambda s, v: setattr(s.cluster, "kubeconfig", v)),
    "--node-ip": (_text, lambda s, v: setattr(s.cluster, "node_ip", v)),
    "--node-labels": (_labels, lambda s, v: setattr(s.cluster, "node_labels", v)),
    "--network-mode": (_network_mode, lambda s, v: setattr(s.network, "mode", v)),
    "--cni-write-config": (_boolean, lambda s, v: setattr(s.network, "write_runtime_config", v)),
    "--cni-bin-dir": (_path_list, lambda s, v: setattr(s.network, "cni_bin_dirs", v)),
    "--cni-conf-dir": (_text, lambda s, v: setattr(s.network, "cni_conf_dir", v)),
    "--cni-socket": (_text, lambda s, v: setattr(s.network, "socket", v)),
    "--cni-bridge": (_interface_name, lambda s, v: setattr(s.network, "bridge", v)),
    "--host-netns": (_text, lambda s, v: setattr(s.network, "host_netns", v)),
}

# Fields paths are resolved against the config file's directory, as the kubelet does.
_PATH_FIELDS = ("staticPodPath",)

# Real KubeletConfiguration fields that pykubelet reads but does not act on yet.
UNIMPLEMENTED_FIELDS = frozenset({
    "address", "port", "readOnlyPort", "tlsCertFile", "tlsPrivateKeyFile", "authentication",
    "authorization", "cgroupDriver", "cgroupRoot", "cgroupsPerQOS",
    "evictionSoft", "evictionPressureTransitionPeriod", "failSwapOn",
    "imageGCHighThresholdPercent", "imageGCLowThresholdPercent", "imageMinimumGCAge",
    "serializeImagePulls", "maxParallelImagePulls",
    "registerWithTaints", "rotateCertificates", "serverTLSBootstrap",
    "hairpinMode", "podPidsLimit", "protectKernelDefaults",
    "kubeReserved", "systemReserved", "enforceNodeAllocatable", "featureGates", "logging",
    "shutdownGracePeriod", "shutdownGracePeriodCriticalPods", "staticPodURL", "staticPodURLHeader",
    "containerLogMaxSize", "containerLogMaxFiles", "cpuManagerPolicy", "memoryManagerPolicy",
    "topologyManagerPolicy", "volumePluginDir", "providerID", "streamingConnectionIdleTimeout",
    "enableServer", "enableDebuggingHandlers", "healthzBindAddress6", "httpCheckFrequency",
})


def load_config_file(path: str, settings: Settings) -> None:
    """Apply a KubeletConfiguration YAML/JSON file onto settings."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the kubelet config file: {e.strerror}") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from e
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: must be a {CONFIG_KIND} object")
    if doc.get("apiVersion") != CONFIG_API_VERSION or doc.get("kind") != CONFIG_KIND:
        raise ConfigError(
            f"{path}: apiVersion/kind must be {CONFIG_API_VERSION}/{CONFIG_KIND}, "
            f"got {doc.get('apiVersion')!r}/{doc.get('kind')!r}")
    base = os.path.dirname(os.path.abspath(path))
    for key, value in doc.items():
        if key in ("apiVersion", "kind"):
            continue
        if key in _FIELDS and not key.startswith("--"):
            parse, assign = _FIELDS[key]
            try:
                parsed = parse(value)
            except ValueError as e:
                raise ConfigError(f"{path}: field {key}: {e}") from e
            if key in _PATH_FIELDS and parsed and not os.path.isabs(parsed):
                parsed = os.path.join(base, parsed)
            assign(settings, parsed)
        elif key in UNIMPLEMENTED_FIELDS:
            log.warning("Kubelet config field not implemented by pykubelet yet; ignored", file=path, field=key)
        else:
            log.warning("Unknown kubelet config field; ignored", file=path, field=key)


# Real kubelet flags pykubelet accepts but does not act on yet (a warning names each one used).
UNIMPLEMENTED_FLAGS = (
    "bootstrap-kubeconfig", "register-with-taints", "cgroup-driver", "fail-swap-on", "pod-infra-container-image",
    "cert-dir", "rotate-certificates", "provider-id",
    "feature-gates", "runtime-cgroups", "kubelet-cgroups", "cloud-provider", "volume-plugin-dir",
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pykubelet",
        description="A small kubelet-like node agent. Without --kubeconfig it runs standalone: "
                    "static Pods from --pod-manifest-path only.",
    )
    p.add_argument("--config", help="path to a KubeletConfiguration file")
    p.add_argument("--pod-manifest-path", help="directory (or file) of static Pod manifests")
    p.add_argument("--container-runtime-endpoint", help="CRI endpoint, e.g. unix:///run/containerd/containerd.sock")
    p.add_argument("--image-service-endpoint", help="CRI image endpoint (default: the runtime endpoint)")
    p.add_argument("--runtime-request-timeout", help="deadline of slow CRI calls, e.g. 2m")
    p.add_argument("--file-check-frequency", help="full rescan period of the manifests, e.g. 20s")
    p.add_argument("--sync-frequency", help="longest time between two syncs of a pod, e.g. 1m")
    p.add_argument("--max-pods", type=int, help="most pods this node runs")
    p.add_argument("--pod-logs-dir", help="where container logs go (default /var/log/pods)")
    p.add_argument("--healthz-bind-address", help="address of /healthz (default 127.0.0.1)")
    p.add_argument("--healthz-port", type=int, help="port of /healthz (default 10248, 0 disables)")
    p.add_argument("--hostname-override", help="node name to use instead of the host name")
    p.add_argument("--root-dir", help="agent state directory (default /var/lib/kubelet)")
    p.add_argument("--v", "-v", type=int, default=None, help="log verbosity (4 and up: debug)")
    p.add_argument("--kubeconfig", help="join the cluster this kubeconfig names; without it: standalone")
    p.add_argument("--node-ip", help="the node's InternalIP (default: the default route's address)")
    p.add_argument("--node-labels", help="extra Node labels: key=value,key2=value2")
    p.add_argument("--register-node", help="create the Node object (true/false, default true)")
    p.add_argument("--cluster-dns", help="comma-separated DNS server IPs for ClusterFirst pods")
    p.add_argument("--cluster-domain", help="the cluster's DNS domain (default cluster.local)")
    p.add_argument("--pod-cidr", help="standalone only: the pod IP range (default 10.88.0.0/16)")
    p.add_argument("--network-mode", help="agent (the agent runs CNI; default) or runtime (containerd does)")
    p.add_argument("--cni-write-config", help="runtime mode: write containerd's bridge conflist (true/false)")
    p.add_argument("--cni-bin-dir", help="CNI plugin dirs, comma-separated (default /opt/cni/bin,/usr/lib/cni)")
    p.add_argument("--cni-conf-dir", help="containerd's CNI config dir (default /etc/cni/net.d)")
    p.add_argument("--cni-socket", help="agent mode: where the CNI shim finds the agent "
                                        "(default /run/pykubelet/cni.sock)")
    p.add_argument("--cni-bridge", help="the node's pod bridge (default pkl0)")
    p.add_argument("--host-netns", help="a netns that plays this node's host network (several nodes on one machine)")
    p.add_argument("--allowed-unsafe-sysctls", help="comma-separated unsafe sysctls or patterns (kernel.msg*) "
                                                    "pods may set")
    for name in UNIMPLEMENTED_FLAGS:
        p.add_argument(f"--{name}", nargs="?", const="true", help=argparse.SUPPRESS)
    return p


_FLAG_TO_FIELD = {
    "pod_manifest_path": "staticPodPath",
    "container_runtime_endpoint": "containerRuntimeEndpoint",
    "image_service_endpoint": "imageServiceEndpoint",
    "runtime_request_timeout": "runtimeRequestTimeout",
    "file_check_frequency": "fileCheckFrequency",
    "sync_frequency": "syncFrequency",
    "max_pods": "maxPods",
    "pod_logs_dir": "podLogsDir",
    "healthz_bind_address": "healthzBindAddress",
    "healthz_port": "healthzPort",
    "register_node": "registerNode",
    "cluster_dns": "clusterDNS",
    "cluster_domain": "clusterDomain",
    "allowed_unsafe_sysctls": "allowedUnsafeSysctls",
    "kubeconfig": "--kubeconfig",
    "node_ip": "--node-ip",
    "node_labels": "--node-labels",
    "pod_cidr": "podCIDR",
    "network_mode": "--network-mode",
    "cni_write_config": "--cni-write-config",
    "cni_bin_dir": "--cni-bin-dir",
    "cni_conf_dir": "--cni-conf-dir",
    "cni_socket": "--cni-socket",
    "cni_bridge": "--cni-bridge",
    "host_netns": "--host-netns",
}


def settings_from_args(args: argparse.Namespace) -> Settings:
    settings = Settings()
    if args.config:
        load_config_file(args.config, settings)
    for attr, key in _FLAG_TO_FIELD.items():
        value = getattr(args, attr)
        if value is None:
            continue
        parse, assign = _FIELDS[key]
        try:
            assign(settings, parse(value))
        except ValueError as e:
            raise ConfigError(f"flag --{attr.replace('_', '-')}: {e}") from e
    for name in UNIMPLEMENTED_FLAGS:
        if getattr(args, name.replace("-", "_")) is not None:
            log.warning("Kubelet flag not implemented by pykubelet yet; ignored", flag=f"--{name}")
    if args.root_dir:
        settings.root_dir = args.root_dir
    if args.v is not None:
        settings.verbosity = args.v
    override = (args.hostname_override or "").strip()
    settings.node_name = (override or socket.gethostname()).lower()
    if settings.pods.static_pod_path:
        settings.pods.static_pod_path = os.path.abspath(settings.pods.static_pod_path)
    if settings.cluster.kubeconfig:
        settings.cluster.kubeconfig = os.path.abspath(settings.cluster.kubeconfig)
    return settings
