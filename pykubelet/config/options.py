"""Every setting the agent reads, in one table: its KubeletConfiguration field and/or its flag,
the parser that checks it, where it lands in Settings, and the flag's help. The argument parser,
the config-file loader and the flag precedence are all generated from OPTIONS.

Adding a setting is adding one row (and its Settings attribute with a docstring).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from pykubelet.config import values as v


@dataclass(frozen=True)
class Option:
    target: str
    """Dotted attribute of Settings the value lands in, e.g. "pods.max_pods"."""
    parse: Callable[[Any], Any]
    """YAML value or flag string -> setting; ValueError says what was expected."""
    field: str = ""
    """KubeletConfiguration field; empty: flag only."""
    flag: str = ""
    """Command-line flag without the dashes; empty: config file only."""
    help: str = ""
    flag_type: Callable[[str], Any] | None = None
    """Converts the flag's text before `parse` (int for counts and ports); None: parse takes text."""
    file_relative: bool = False
    """A relative path in the config file is relative to the file, as the kubelet resolves it."""
    aliases: tuple[str, ...] = ()
    """Other spellings of the flag, e.g. -v for --v."""

    @property
    def dest(self) -> str:
        """The argparse destination of the flag."""
        return self.flag.replace("-", "_")


OPTIONS: tuple[Option, ...] = (
    # --- the node itself
    Option("node_name", v.text, flag="hostname-override",
           help="node name to use instead of the host name"),
    Option("root_dir", v.text, flag="root-dir", help="agent state directory (default /var/lib/kubelet)"),
    Option("verbosity", v.non_negative_int, flag="v", aliases=("-v",), flag_type=int,
           help="log verbosity (4 and up: debug)"),
    # --- the container runtime
    Option("runtime.endpoint", v.endpoint, "containerRuntimeEndpoint", "container-runtime-endpoint",
           "CRI endpoint, e.g. unix:///run/containerd/containerd.sock"),
    Option("runtime.image_endpoint", v.endpoint, "imageServiceEndpoint", "image-service-endpoint",
           "CRI image endpoint (default: the runtime endpoint)"),
    Option("runtime.request_timeout", v.positive_duration, "runtimeRequestTimeout", "runtime-request-timeout",
           "deadline of slow CRI calls, e.g. 2m"),
    # --- pods
    Option("pods.static_pod_path", v.text, "staticPodPath", "pod-manifest-path",
           "directory (or file) of static Pod manifests", file_relative=True),
    Option("pods.file_check_frequency", v.positive_duration, "fileCheckFrequency", "file-check-frequency",
           "full rescan period of the manifests, e.g. 20s"),
    Option("pods.sync_frequency", v.positive_duration, "syncFrequency", "sync-frequency",
           "longest time between two syncs of a pod, e.g. 1m"),
    Option("pods.max_pods", v.positive_int, "maxPods", "max-pods", "most pods this node runs", flag_type=int),
    Option("pods.pod_logs_dir", v.text, "podLogsDir", "pod-logs-dir",
           "where container logs go (default /var/log/pods)"),
    Option("pods.cgroup_root", v.text, "cgroupRoot", "cgroup-root",
           "cgroup the pods' kubepods cgroup goes under (default: the root, /kubepods)"),
    Option("pods.allowed_unsafe_sysctls", v.sysctl_patterns, "allowedUnsafeSysctls", "allowed-unsafe-sysctls",
           "comma-separated unsafe sysctls or patterns (kernel.msg*) pods may set"),
    # --- local endpoints
    Option("server.healthz_bind_address", v.text, "healthzBindAddress", "healthz-bind-address",
           "address of /healthz (default 127.0.0.1)"),
    Option("server.healthz_port", v.port, "healthzPort", "healthz-port",
           "port of /healthz (default 10248, 0 disables)", flag_type=int),
    # --- the kubelet API on :10250 (server/): listener, TLS, authentication, authorization
    Option("server.address", v.text, "address", "address", "address of the kubelet API (default 0.0.0.0)"),
    Option("server.port", v.port, "port", "port", "port of the kubelet API (default 10250, 0 disables)",
           flag_type=int),
    Option("server.tls_cert_file", v.text, "tlsCertFile", "tls-cert-file",
           "serving certificate of the kubelet API (default: self-signed in <root-dir>/pki)", file_relative=True),
    Option("server.tls_private_key_file", v.text, "tlsPrivateKeyFile", "tls-private-key-file",
           "its private key", file_relative=True),
    Option("server.tls_min_version", v.tls_version, "tlsMinVersion", "tls-min-version",
           "lowest TLS version: VersionTLS10..VersionTLS13 (default VersionTLS12)"),
    Option("server.tls_cipher_suites", v.cipher_suites, "tlsCipherSuites", "tls-cipher-suites",
           "comma-separated TLS 1.2 cipher suites (IANA names)"),
    Option("server.enable_debugging_handlers", v.boolean, "enableDebuggingHandlers", "enable-debugging-handlers",
           "serve logs, exec, attach, port-forward and run (true/false, default true)"),
    Option("server.enable_system_log_handler", v.boolean, "enableSystemLogHandler"),
    Option("authn.client_ca_file", v.text, "authentication.x509.clientCAFile", "client-ca-file",
           "CA bundle that signs client certificates of the kubelet API", file_relative=True),
    Option("authn.anonymous_enabled", v.boolean, "authentication.anonymous.enabled", "anonymous-auth",
           "let requests without credentials in as system:anonymous (true/false, default false)"),
    Option("authn.webhook_enabled", v.boolean, "authentication.webhook.enabled", "authentication-token-webhook",
           "check bearer tokens with TokenReview (true/false, default true)"),
    Option("authn.webhook_cache_ttl", v.non_negative_duration, "authentication.webhook.cacheTTL",
           "authentication-token-webhook-cache-ttl", "how long TokenReview answers are reused (default 2m)"),
    Option("authz.mode", v.authorization_mode, "authorization.mode", "authorization-mode",
           "Webhook (SubjectAccessReview, default) or AlwaysAllow"),
    Option("authz.cache_authorized_ttl", v.non_negative_duration, "authorization.webhook.cacheAuthorizedTTL",
           "authorization-webhook-cache-authorized-ttl", "how long an allowed answer is reused (default 5m)"),
    Option("authz.cache_unauthorized_ttl", v.non_negative_duration, "authorization.webhook.cacheUnauthorizedTTL",
           "authorization-webhook-cache-unauthorized-ttl", "how long a denied answer is reused (default 30s)"),
    # --- joining a cluster
    Option("cluster.kubeconfig", v.text, flag="kubeconfig",
           help="join the cluster this kubeconfig names; without it: standalone"),
    Option("cluster.node_ip", v.text, flag="node-ip", help="the node's InternalIP (default: the default route's address)"),
    Option("cluster.node_labels", v.labels, flag="node-labels", help="extra Node labels: key=value,key2=value2"),
    Option("cluster.register_node", v.boolean, "registerNode", "register-node",
           "create the Node object (true/false, default true)"),
    Option("cluster.status_update_seconds", v.positive_duration, "nodeStatusUpdateFrequency"),
    Option("cluster.status_report_seconds", v.positive_duration, "nodeStatusReportFrequency"),
    Option("cluster.lease_duration_seconds", v.positive_int, "nodeLeaseDurationSeconds"),
    Option("cluster.api_qps", v.positive_number, "kubeAPIQPS"),
    Option("cluster.api_burst", v.positive_int, "kubeAPIBurst"),
    Option("cluster.eviction_hard", v.thresholds, "evictionHard"),
    Option("cluster.cluster_dns", v.ip_list, "clusterDNS", "cluster-dns",
           "comma-separated DNS server IPs for ClusterFirst pods"),
    Option("cluster.cluster_domain", v.text, "clusterDomain", "cluster-domain",
           "the cluster's DNS domain (default cluster.local)"),
    Option("cluster.resolv_conf", v.text, "resolvConf"),
    # --- the pod network
    Option("network.pod_cidr", v.cidr, "podCIDR", "pod-cidr", "standalone only: the pod IP range (default 10.88.0.0/16)"),
    Option("network.mode", v.network_mode, flag="network-mode",
           help="agent (the agent runs CNI; default) or runtime (containerd does)"),
    Option("network.write_runtime_config", v.boolean, flag="cni-write-config",
           help="runtime mode: write containerd's bridge conflist (true/false)"),
    Option("network.cni_bin_dirs", v.path_list, flag="cni-bin-dir",
           help="CNI plugin dirs, comma-separated (default /opt/cni/bin,/usr/lib/cni)"),
    Option("network.cni_conf_dir", v.text, flag="cni-conf-dir", help="containerd's CNI config dir (default /etc/cni/net.d)"),
    Option("network.socket", v.text, flag="cni-socket",
           help="agent mode: where the CNI shim finds the agent (default /run/pykubelet/cni.sock)"),
    Option("network.bridge", v.interface_name, flag="cni-bridge", help="the node's pod bridge (default pkl0)"),
    Option("network.host_netns", v.text, flag="host-netns",
           help="a netns that plays this node's host network (several nodes on one machine)"),
)

OPTIONS_BY_FIELD = {o.field: o for o in OPTIONS if o.field}

# Real KubeletConfiguration fields that pykubelet reads but does not act on yet.
UNIMPLEMENTED_FIELDS = frozenset({
    "readOnlyPort", "cgroupDriver", "cgroupsPerQOS",
    "evictionSoft", "evictionPressureTransitionPeriod", "failSwapOn",
    "imageGCHighThresholdPercent", "imageGCLowThresholdPercent", "imageMinimumGCAge",
    "serializeImagePulls", "maxParallelImagePulls",
    "registerWithTaints", "rotateCertificates", "serverTLSBootstrap",
    "hairpinMode", "podPidsLimit", "protectKernelDefaults",
    "kubeReserved", "systemReserved", "enforceNodeAllocatable", "featureGates", "logging",
    "shutdownGracePeriod", "shutdownGracePeriodCriticalPods", "staticPodURL", "staticPodURLHeader",
    "containerLogMaxSize", "containerLogMaxFiles", "cpuManagerPolicy", "memoryManagerPolicy",
    "topologyManagerPolicy", "volumePluginDir", "providerID", "streamingConnectionIdleTimeout",
    "enableServer", "healthzBindAddress6", "httpCheckFrequency",
})

# Real kubelet flags pykubelet accepts but does not act on yet (a warning names each one used).
UNIMPLEMENTED_FLAGS = (
    "bootstrap-kubeconfig", "register-with-taints", "cgroup-driver", "fail-swap-on", "pod-infra-container-image",
    "cert-dir", "rotate-certificates", "provider-id",
    "feature-gates", "runtime-cgroups", "kubelet-cgroups", "cloud-provider", "volume-plugin-dir",
)
