"""The agent's settings: grouped dataclasses whose docstrings give each value's unit and default.

Where a value comes from (a flag, a KubeletConfiguration field) is `options.py`'s business.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from pykubelet.api.eviction import DEFAULT_EVICTION_HARD, Amount, Threshold, eviction_thresholds, parse_thresholds
from pykubelet.api.quantity import integer_quantity
from pykubelet.config.node_lifecycle import ShutdownSettings, SwapSettings

NETWORK_MODES = ("agent", "runtime")
STANDALONE_POD_CIDR = "10.88.0.0/16"  # containerd's own default pod range


@dataclass
class RuntimeSettings:
    """How to reach the container runtime over CRI."""

    endpoint: str = "unix:///run/containerd/containerd.sock"
    """containerRuntimeEndpoint / --container-runtime-endpoint."""
    image_endpoint: str = ""
    """imageServiceEndpoint; empty means the runtime endpoint."""
    request_timeout: float = 120.0
    """runtimeRequestTimeout, seconds (default 2m): the deadline of slow CRI calls such as PullImage."""
    cgroup_driver: str = "cgroupfs"
    """cgroupDriver / --cgroup-driver: the pods' cgroups as cgroupfs directories (kubepods/burstable/pod<uid>)
    or as systemd slices (kubeadm's default); it must be the runtime's (checked at start)."""
    image_credential_provider_config: str = ""
    """--image-credential-provider-config: a CredentialProviderConfig file, or a directory of them,
    naming the exec plugins that give registry credentials; empty: none."""
    image_credential_provider_bin_dir: str = ""
    """--image-credential-provider-bin-dir: where those plugins' programs are."""


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
    cgroup_root: str = ""
    """cgroupRoot / --cgroup-root: the cgroup the pods' `kubepods` cgroup goes under, in every
    hierarchy; empty: the hierarchies' root (/kubepods)."""
    allowed_unsafe_sysctls: list[str] = field(default_factory=list)
    """allowedUnsafeSysctls / --allowed-unsafe-sysctls: sysctls (or `prefix*`) pods may set besides
    the safe ones; each must be namespaced (kernel.shm*, kernel.msg*, kernel.sem, fs.mqueue.*, net.*)."""


@dataclass
class ServerSettings:
    """The kubelet API (HTTPS, authenticated) and the local plain-HTTP /healthz."""

    healthz_bind_address: str = "127.0.0.1"
    """healthzBindAddress: where /healthz and pykubelet's local /pods listen."""
    healthz_port: int = 10248
    """healthzPort; 0 disables the endpoint."""
    address: str = "0.0.0.0"
    """address / --address: where the kubelet API listens."""
    port: int = 10250
    """port / --port: the kubelet API's port (the Node's daemonEndpoints report it); 0 disables it."""
    tls_cert_file: str = ""
    """tlsCertFile / --tls-cert-file: the serving certificate (chain); empty: a self-signed one
    kept in <cert-dir>/kubelet.crt, made once and reused."""
    tls_private_key_file: str = ""
    """tlsPrivateKeyFile / --tls-private-key-file: its key."""
    server_tls_bootstrap: bool = False
    """serverTLSBootstrap / --rotate-server-certificates: get the serving certificate from the
    cluster (a kubelet-serving CSR for the node's addresses, approved by an admin or an approver)
    and rotate it; kept in <cert-dir>/kubelet-server-current.pem. No self-signed one is made."""
    tls_min_version: str = ""
    """tlsMinVersion / --tls-min-version: VersionTLS10..VersionTLS13; empty: TLS 1.2."""
    tls_cipher_suites: list[str] = field(default_factory=list)
    """tlsCipherSuites / --tls-cipher-suites: Go/IANA names of the TLS 1.2 suites allowed; empty: defaults."""
    enable_debugging_handlers: bool = True
    """enableDebuggingHandlers: logs, exec, attach, port-forward, run and /runningpods/ (405 when false)."""
    enable_system_log_handler: bool = True
    """enableSystemLogHandler: /logs/ serves the node's /var/log."""


@dataclass
class AuthnSettings:
    """Who a request on the kubelet API comes from (KubeletConfiguration authentication.*)."""

    anonymous_enabled: bool = False
    """authentication.anonymous.enabled / --anonymous-auth: requests without credentials run as
    system:anonymous; off: they get 401."""
    webhook_enabled: bool = True
    """authentication.webhook.enabled / --authentication-token-webhook: bearer tokens through TokenReview."""
    webhook_cache_ttl: float = 120.0
    """authentication.webhook.cacheTTL, seconds (default 2m): how long a TokenReview answer is reused."""
    client_ca_file: str = ""
    """authentication.x509.clientCAFile / --client-ca-file: CA bundle of client certificates
    (user = CN, groups = O); empty: no client certificates."""


@dataclass
class ContainerLogSettings:
    """Rotation of the containers' log files (the kubelet's container log manager)."""

    max_size: str = "10Mi"
    """containerLogMaxSize / --container-log-max-size: a quantity ("10Mi", "256Ki"); a running
    container's log file at least this big is rotated. Negative: logs are never rotated."""
    max_files: int = 5
    """containerLogMaxFiles / --container-log-max-files (at least 2): a container's log files at most,
    the live one included; the oldest rotated ones are removed."""
    max_workers: int = 1
    """containerLogMaxWorkers (at least 1): containers whose logs are rotated at once."""
    monitor_interval: float = 10.0
    """containerLogMonitorInterval, seconds (at least 3s, default 10s): how often the sizes are checked."""

    @property
    def max_size_bytes(self) -> int:
        return integer_quantity(self.max_size)


AUTHORIZATION_MODES = ("Webhook", "AlwaysAllow")


@dataclass
class AuthzSettings:
    """What an authenticated request may do (KubeletConfiguration authorization.*)."""

    mode: str = "Webhook"
    """authorization.mode / --authorization-mode: Webhook (SubjectAccessReview) or AlwaysAllow."""
    cache_authorized_ttl: float = 300.0
    """authorization.webhook.cacheAuthorizedTTL, seconds (default 5m)."""
    cache_unauthorized_ttl: float = 30.0
    """authorization.webhook.cacheUnauthorizedTTL, seconds (default 30s)."""


@dataclass
class ClusterSettings:
    """Joining a cluster: without a kubeconfig the agent runs standalone (static pods only)."""

    kubeconfig: str = ""
    """--kubeconfig: credentials for the apiserver; empty: standalone."""
    bootstrap_kubeconfig: str = ""
    """--bootstrap-kubeconfig: (bootstrap token) credentials to get a client certificate with when
    --kubeconfig is missing or its certificate is unusable; it then writes --kubeconfig (TLS bootstrap)."""
    cert_dir: str = ""
    """--cert-dir: where kubelet-client-<time>.pem and the kubelet-client-current.pem link live;
    empty: <root-dir>/pki (Settings.certificate_dir)."""
    rotate_certificates: bool = False
    """rotateCertificates / --rotate-certificates: renew the client certificate at a random point of
    70-90% of its lifetime, with the node's own credentials."""
    register_with_taints: list[dict[str, str]] = field(default_factory=list)
    """registerWithTaints / --register-with-taints: the Node's taints when the agent creates it."""
    provider_id: str = ""
    """providerID / --provider-id: the Node's spec.providerID when the agent creates it."""
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
    """evictionHard: signal -> threshold; below one, the node reports pressure and evicts a pod at once."""
    eviction_soft: dict[str, Threshold] = field(default_factory=dict)
    """evictionSoft: signal -> threshold that evicts once crossed for its evictionSoftGracePeriod."""
    eviction_soft_grace_period: dict[str, float] = field(default_factory=dict)
    """evictionSoftGracePeriod: signal -> seconds; every soft threshold needs one."""
    eviction_minimum_reclaim: dict[str, Amount] = field(default_factory=dict)
    """evictionMinimumReclaim: signal -> how much more than its threshold must be back before pressure ends."""
    eviction_max_pod_grace_period: int = 0
    """evictionMaxPodGracePeriod: the longest grace period (s) a pod evicted for a soft threshold gets."""
    eviction_pressure_transition_period: float = 300.0
    """evictionPressureTransitionPeriod (default 5m): a pressure condition stays that long after its
    signal recovered."""
    cluster_dns: list[str] = field(default_factory=list)
    """clusterDNS / --cluster-dns: nameservers for ClusterFirst pods; empty: they get the host's."""
    cluster_domain: str = "cluster.local"
    """clusterDomain / --cluster-domain: the DNS domain ClusterFirst pods search."""
    resolv_conf: str = "/etc/resolv.conf"
    """resolvConf: the host resolver file that dnsPolicy Default copies."""


@dataclass
class NetworkSettings:
    """The pod network (docs/network.md). Modes:
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
class ImageGCSettings:
    """Image garbage collection (runtime/image_gc.py): unused images are removed when the image
    filesystem fills up, or when unused for too long. Off when high is 100 and maximum_age is 0."""

    high_threshold_percent: int = 85
    """imageGCHighThresholdPercent / --image-gc-high-threshold: image filesystem usage (0-100) at which
    unused images are removed; 100 never starts a removal for space."""
    low_threshold_percent: int = 80
    """imageGCLowThresholdPercent / --image-gc-low-threshold: the usage a removal frees down to; below high."""
    minimum_age: float = 120.0
    """imageMinimumGCAge / --minimum-image-ttl-duration, seconds (default 2m): an image first seen less
    than this long ago is never removed for space (it may have just been pulled for a pod)."""
    maximum_age: float = 0.0
    """imageMaximumGCAge, seconds: an image unused for longer is removed whatever the usage; 0 disables.
    Above minimum_age when set."""


@dataclass
class Settings:
    """Everything the agent is told: the node's identity and one group per concern."""

    node_name: str = ""
    """--hostname-override, else the host name lowercased, as the kubelet does."""
    root_dir: str = "/var/lib/kubelet"
    """--root-dir: the agent's state (per-pod directories, checkpoints)."""
    verbosity: int = 0
    """--v: 0 logs info; 4 and up log debug."""
    runtime: RuntimeSettings = field(default_factory=RuntimeSettings)
    pods: PodSettings = field(default_factory=PodSettings)
    server: ServerSettings = field(default_factory=ServerSettings)
    authn: AuthnSettings = field(default_factory=AuthnSettings)
    authz: AuthzSettings = field(default_factory=AuthzSettings)
    cluster: ClusterSettings = field(default_factory=ClusterSettings)
    network: NetworkSettings = field(default_factory=NetworkSettings)
    image_gc: ImageGCSettings = field(default_factory=ImageGCSettings)
    container_logs: ContainerLogSettings = field(default_factory=ContainerLogSettings)
    shutdown: ShutdownSettings = field(default_factory=ShutdownSettings)
    swap: SwapSettings = field(default_factory=SwapSettings)

    def eviction_thresholds(self) -> list[Threshold]:
        """Every eviction threshold, hard and soft, with grace periods and minimum reclaims;
        ValueError when a soft one has no grace period."""
        c = self.cluster
        return eviction_thresholds(c.eviction_hard, c.eviction_soft, c.eviction_soft_grace_period,
                                   c.eviction_minimum_reclaim)

    def certificate_dir(self) -> str:
        """The one rule for where the node's certificates live (client, serving, self-signed),
        as the kubelet's --cert-dir: the flag, else <root-dir>/pki."""
        return self.cluster.cert_dir or os.path.join(os.path.abspath(self.root_dir), "pki")
