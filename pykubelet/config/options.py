"""Every setting the agent reads, in one table: its KubeletConfiguration field and/or its flag,
the parser that checks it, where it lands in Settings, and the flag's help. The argument parser,
the config-file loader and the flag precedence are all generated from OPTIONS.

Adding a setting is adding one row (and its Settings attribute with a docstring). The real
kubelet's settings that pykubelet accepts but does not act on are rows too, with no target
(config/ignored.py): their values are still checked, and a warning names each one that asks for
something pykubelet does not do.
"""

from __future__ import annotations

from pykubelet.config import node_lifecycle as life
from pykubelet.config import shapes
from pykubelet.config import values as v
from pykubelet.config.ignored import IGNORED
from pykubelet.config.option import Option

__all__ = ["OPTIONS", "OPTIONS_BY_FIELD", "Option", "UNIMPLEMENTED_FIELDS", "UNIMPLEMENTED_FLAGS"]


Z = True  # zero_is_default, for the rows below

OPTIONS: tuple[Option, ...] = (
    # --- the node itself
    Option("node_name", v.text, flag="hostname-override",
           help="node name to use instead of the host name"),
    Option("root_dir", v.text, flag="root-dir", help="agent state directory (default /var/lib/kubelet)"),
    Option("verbosity", v.non_negative_int, "logging.verbosity", "v", aliases=("-v",), flag_type=int,
           help="log verbosity (4 and up: debug)"),
    # --- the container runtime
    Option("runtime.endpoint", v.endpoint, "containerRuntimeEndpoint", "container-runtime-endpoint",
           "CRI endpoint, e.g. unix:///run/containerd/containerd.sock", zero_is_default=Z),
    Option("runtime.image_endpoint", v.endpoint, "imageServiceEndpoint", "image-service-endpoint",
           "CRI image endpoint (default: the runtime endpoint)", zero_is_default=Z),
    Option("runtime.request_timeout", v.positive_duration, "runtimeRequestTimeout", "runtime-request-timeout",
           "deadline of slow CRI calls, e.g. 2m", zero_is_default=Z),
    Option("runtime.cgroup_driver", v.cgroup_driver, "cgroupDriver", "cgroup-driver",
           "cgroupfs or systemd: how pod cgroups are made; must match the runtime's", zero_is_default=Z),
    Option("runtime.image_credential_provider_config", v.text, flag="image-credential-provider-config",
           help="credential provider plugin config file (JSON/YAML) or a directory of such files (merged in "
                "lexical order)"),
    Option("runtime.image_credential_provider_bin_dir", v.text, flag="image-credential-provider-bin-dir",
           help="directory of the credential provider plugins' programs"),
    # --- image garbage collection
    Option("image_gc.high_threshold_percent", v.percent, "imageGCHighThresholdPercent", "image-gc-high-threshold",
           "image filesystem usage (%) at which unused images are removed (default 85; 100: never for space)",
           flag_type=int),
    Option("image_gc.low_threshold_percent", v.percent, "imageGCLowThresholdPercent", "image-gc-low-threshold",
           "usage (%) image garbage collection frees down to (default 80)", flag_type=int),
    Option("image_gc.minimum_age", v.non_negative_duration, "imageMinimumGCAge", "minimum-image-ttl-duration",
           "an image first seen more recently is not removed for space (default 2m)", zero_is_default=Z),
    Option("image_gc.maximum_age", v.non_negative_duration, "imageMaximumGCAge"),
    # --- pods
    Option("pods.static_pod_path", v.text, "staticPodPath", "pod-manifest-path",
           "directory (or file) of static Pod manifests", file_relative=True),
    Option("pods.file_check_frequency", v.positive_duration, "fileCheckFrequency", "file-check-frequency",
           "full rescan period of the manifests, e.g. 20s", zero_is_default=Z),
    Option("pods.sync_frequency", v.positive_duration, "syncFrequency", "sync-frequency",
           "longest time between two syncs of a pod, e.g. 1m", zero_is_default=Z),
    Option("pods.max_pods", v.positive_int, "maxPods", "max-pods", "most pods this node runs", flag_type=int,
           zero_is_default=Z),
    Option("pods.pod_logs_dir", v.text, "podLogsDir", "pod-logs-dir",
           "where container logs go (default /var/log/pods)", zero_is_default=Z),
    Option("pods.cgroup_root", v.text, "cgroupRoot", "cgroup-root",
           "cgroup the pods' kubepods cgroup goes under (default: the root, /kubepods)", zero_is_default=Z),
    Option("pods.allowed_unsafe_sysctls", v.sysctl_patterns, "allowedUnsafeSysctls", "allowed-unsafe-sysctls",
           "comma-separated unsafe sysctls or patterns (kernel.msg*) pods may set", repeatable=True),
    # --- container logs (runtime/log_rotation.py)
    Option("container_logs.max_size", v.log_max_size, "containerLogMaxSize", "container-log-max-size",
           "rotate a container's log file once it is this big, e.g. 10Mi (negative: never)", zero_is_default=Z),
    Option("container_logs.max_files", v.log_max_files, "containerLogMaxFiles", "container-log-max-files",
           "most log files of a container, the live one included; at least 2 (default 5)", flag_type=int),
    Option("container_logs.max_workers", v.positive_int, "containerLogMaxWorkers"),
    Option("container_logs.monitor_interval", v.log_monitor_interval, "containerLogMonitorInterval"),
    # --- local endpoints
    Option("server.healthz_bind_address", v.text, "healthzBindAddress", "healthz-bind-address",
           "address of /healthz (default 127.0.0.1)", zero_is_default=Z),
    Option("server.healthz_port", v.port, "healthzPort", "healthz-port",
           "port of /healthz (default 10248, 0 disables)", flag_type=int),
    # --- the kubelet API on :10250 (server/): listener, TLS, authentication, authorization
    Option("server.address", v.text, "address", "address", "address of the kubelet API (default 0.0.0.0)",
           zero_is_default=Z),
    Option("server.port", v.port, "port", "port", "port of the kubelet API (default 10250, 0 disables)",
           flag_type=int, zero_is_default=Z),
    Option("server.tls_cert_file", v.text, "tlsCertFile", "tls-cert-file",
           "serving certificate of the kubelet API (default: self-signed in the cert dir)", file_relative=True),
    Option("server.tls_private_key_file", v.text, "tlsPrivateKeyFile", "tls-private-key-file",
           "its private key", file_relative=True),
    Option("server.server_tls_bootstrap", v.boolean, "serverTLSBootstrap", "rotate-server-certificates",
           "request the serving certificate from the cluster (kubelet-serving CSR) and rotate it (true/false, "
           "default false)"),
    Option("server.tls_min_version", v.tls_version, "tlsMinVersion", "tls-min-version",
           "lowest TLS version: VersionTLS10..VersionTLS13 (default VersionTLS12)", zero_is_default=Z),
    Option("server.tls_cipher_suites", v.cipher_suites, "tlsCipherSuites", "tls-cipher-suites",
           "comma-separated TLS 1.2 cipher suites (IANA names)", repeatable=True),
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
           "authentication-token-webhook-cache-ttl", "how long TokenReview answers are reused (default 2m)",
           zero_is_default=Z),
    Option("authz.mode", v.authorization_mode, "authorization.mode", "authorization-mode",
           "Webhook (SubjectAccessReview, default) or AlwaysAllow", zero_is_default=Z),
    Option("authz.cache_authorized_ttl", v.non_negative_duration, "authorization.webhook.cacheAuthorizedTTL",
           "authorization-webhook-cache-authorized-ttl", "how long an allowed answer is reused (default 5m)",
           zero_is_default=Z),
    Option("authz.cache_unauthorized_ttl", v.non_negative_duration, "authorization.webhook.cacheUnauthorizedTTL",
           "authorization-webhook-cache-unauthorized-ttl", "how long a denied answer is reused (default 30s)",
           zero_is_default=Z),
    # --- joining a cluster
    Option("cluster.kubeconfig", v.text, flag="kubeconfig",
           help="join the cluster this kubeconfig names; without it: standalone"),
    Option("cluster.bootstrap_kubeconfig", v.text, flag="bootstrap-kubeconfig",
           help="when --kubeconfig is missing or its certificate unusable: get a client certificate with these "
                "(bootstrap token) credentials, then write --kubeconfig"),
    Option("cluster.cert_dir", v.text, flag="cert-dir",
           help="where the node's certificates go: client, serving, self-signed (default <root-dir>/pki)"),
    Option("cluster.rotate_certificates", v.boolean, "rotateCertificates", "rotate-certificates",
           "renew the client certificate before it expires (true/false, default false)"),
    Option("cluster.node_ip", v.text, flag="node-ip", help="the node's InternalIP (default: the default route's address)"),
    Option("cluster.node_labels", v.labels, flag="node-labels", help="extra Node labels: key=value,key2=value2",
           repeatable=True),
    Option("cluster.register_node", v.boolean, "registerNode", "register-node",
           "create the Node object (true/false, default true)"),
    Option("cluster.register_with_taints", v.taints, "registerWithTaints", "register-with-taints",
           "taints of the Node when it is created: key=value:Effect,key2:Effect"),
    Option("cluster.provider_id", v.text, "providerID", "provider-id", "the Node's spec.providerID"),
    Option("cluster.status_update_seconds", v.positive_duration, "nodeStatusUpdateFrequency",
           "node-status-update-frequency", "how often node status is computed (default 10s)", zero_is_default=Z),
    Option("cluster.status_report_seconds", v.positive_duration, "nodeStatusReportFrequency", zero_is_default=Z),
    Option("cluster.lease_duration_seconds", v.positive_int, "nodeLeaseDurationSeconds", zero_is_default=Z),
    Option("cluster.api_qps", v.positive_number, "kubeAPIQPS", "kube-api-qps",
           "sustained apiserver requests per second (default 50)", flag_type=int, zero_is_default=Z),
    Option("cluster.api_burst", v.positive_int, "kubeAPIBurst", "kube-api-burst",
           "apiserver requests allowed in a burst (default 100)", flag_type=int, zero_is_default=Z),
    Option("cluster.eviction_hard", v.thresholds, "evictionHard", "eviction-hard",
           "hard eviction thresholds, e.g. memory.available<100Mi,nodefs.available<10%"),
    Option("cluster.eviction_soft", v.thresholds, "evictionSoft", "eviction-soft",
           "soft eviction thresholds, e.g. memory.available<1.5Gi (each needs a grace period)"),
    Option("cluster.eviction_soft_grace_period", v.grace_periods, "evictionSoftGracePeriod",
           "eviction-soft-grace-period", "how long each soft threshold must hold, e.g. memory.available=1m30s"),
    Option("cluster.eviction_minimum_reclaim", v.minimum_reclaims, "evictionMinimumReclaim", "eviction-minimum-reclaim",
           "how much beyond a threshold is reclaimed, e.g. imagefs.available=2Gi"),
    Option("cluster.eviction_max_pod_grace_period", shapes.integer, "evictionMaxPodGracePeriod",
           "eviction-max-pod-grace-period", "longest grace period (s) of a pod evicted for a soft threshold",
           flag_type=int),
    Option("cluster.eviction_pressure_transition_period", v.non_negative_duration, "evictionPressureTransitionPeriod",
           "eviction-pressure-transition-period", "how long a pressure condition outlives its signal (default 5m)",
           zero_is_default=Z),
    Option("cluster.cluster_dns", v.ip_list, "clusterDNS", "cluster-dns",
           "comma-separated DNS server IPs for ClusterFirst pods", repeatable=True),
    Option("cluster.cluster_domain", v.text, "clusterDomain", "cluster-domain",
           "the cluster's DNS domain (default cluster.local)"),
    Option("cluster.resolv_conf", v.text, "resolvConf", "resolv-conf",
           "the host resolver file dnsPolicy Default pods get (default /etc/resolv.conf)"),
    # --- the node's own life (config/node_lifecycle.py)
    Option("shutdown.grace_period", v.non_negative_duration, "shutdownGracePeriod"),
    Option("shutdown.grace_period_critical_pods", v.non_negative_duration, "shutdownGracePeriodCriticalPods"),
    Option("shutdown.by_pod_priority", life.grace_periods_by_priority, "shutdownGracePeriodByPodPriority"),
    Option("swap.fail_swap_on", v.boolean, "failSwapOn", "fail-swap-on",
           "refuse to start while the node has swap on (true/false, default true)"),
    Option("swap.swap_behavior", life.swap_behavior, "memorySwap.swapBehavior"),
    # --- the pod network
    Option("network.pod_cidr", v.cidr, "podCIDR", "pod-cidr", "standalone only: the pod IP range (default 10.88.0.0/16)",
           zero_is_default=Z),
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
) + IGNORED

OPTIONS_BY_FIELD = {o.field: o for o in OPTIONS if o.field}

# What no row targets: accepted, checked, warned about when asked for something pykubelet does not do.
UNIMPLEMENTED_FIELDS = frozenset(o.field for o in OPTIONS if o.field and not o.implemented)
UNIMPLEMENTED_FLAGS = tuple(o.flag for o in OPTIONS if o.flag and not o.implemented)
