"""The rest of the real kubelet's settings (v1.36): rows of the same table as options.py, with no
target. Each is accepted in the config file and as a flag, its value checked like the kubelet
checks it (a wrong type is an error naming the field or flag), and a warning names it when the
value asks for something pykubelet does not do. `acts_as` is what pykubelet behaves as; HARMLESS
rows tune something pykubelet has no use for and are never warned about.

The list follows the kubelet's own: every KubeletConfiguration v1beta1 field and every flag of
`kubelet --help` that options.py does not implement (tests/kubeadm/test_kubelet_flags.py checks it
against the real binary), plus the few removed flags old install guides still pass.
"""

from __future__ import annotations

from pykubelet.config import values as v
from pykubelet.config.option import HARMLESS, Option


def _ignored(field: str, flag: str, parse, acts_as=None, note: str = "", *, flag_type=None,
             repeatable: bool = False) -> Option:
    return Option("", parse, field, flag, flag_type=flag_type, repeatable=repeatable, acts_as=acts_as, note=note)


NO_CGROUP_TREE = "pykubelet puts every pod under the runtime's default cgroup parent"
NO_MANAGER = "pykubelet has no CPU, memory or topology manager"
REMOVED = "no longer a kubelet flag (removed upstream)"

IGNORED: tuple[Option, ...] = (
    # --- serving
    _ignored("enableServer", "enable-server", v.boolean, True),
    _ignored("readOnlyPort", "read-only-port", v.integer, 0, "pykubelet serves no read-only port", flag_type=int),
    _ignored("tlsCurvePreferences", "", v.int_list),
    _ignored("serverTLSBootstrap", "rotate-server-certificates", v.boolean, False,
             "the serving certificate stays the one in tlsCertFile or the self-signed one"),
    _ignored("enableContentionProfiling", "contention-profiling", v.boolean, HARMLESS),
    _ignored("enableProfilingHandler", "", v.boolean, HARMLESS),
    _ignored("enableDebugFlagsHandler", "", v.boolean, HARMLESS),
    _ignored("enableSystemLogQuery", "", v.boolean, False),
    _ignored("streamingConnectionIdleTimeout", "streaming-connection-idle-timeout", v.duration, HARMLESS),
    _ignored("showHiddenMetricsForVersion", "", v.text, HARMLESS),
    # --- static pods from a URL
    _ignored("staticPodURL", "manifest-url", v.text, "", "static pods come from staticPodPath only"),
    _ignored("staticPodURLHeader", "manifest-url-header", v.mapping, HARMLESS, flag_type=v.flag_as_object),
    _ignored("httpCheckFrequency", "http-check-frequency", v.duration, HARMLESS),
    # --- images
    _ignored("registryPullQPS", "registry-qps", v.integer, HARMLESS, flag_type=int),
    _ignored("registryBurst", "registry-burst", v.integer, HARMLESS, flag_type=int),
    _ignored("serializeImagePulls", "serialize-image-pulls", v.boolean, HARMLESS),
    _ignored("maxParallelImagePulls", "", v.integer, HARMLESS),
    _ignored("imagePullCredentialsVerificationPolicy", "", v.text, "", "images are pulled as the pod asks"),
    _ignored("preloadedImagesVerificationAllowlist", "", v.string_list, HARMLESS),
    _ignored("imageMinimumGCAge", "minimum-image-ttl-duration", v.duration, None, "pykubelet collects no images"),
    _ignored("imageMaximumGCAge", "", v.duration, None, "pykubelet collects no images"),
    _ignored("imageGCHighThresholdPercent", "image-gc-high-threshold", v.integer, None,
             "pykubelet collects no images", flag_type=int),
    _ignored("imageGCLowThresholdPercent", "image-gc-low-threshold", v.integer, None,
             "pykubelet collects no images", flag_type=int),
    _ignored("", "image-credential-provider-config", v.text, "", "images are pulled without credential plugins"),
    _ignored("", "image-credential-provider-bin-dir", v.text, HARMLESS),
    # --- events and the apiserver client
    _ignored("eventRecordQPS", "event-qps", v.integer, HARMLESS, flag_type=int),
    _ignored("eventBurst", "event-burst", v.integer, HARMLESS, flag_type=int),
    _ignored("contentType", "kube-api-content-type", v.text, HARMLESS),
    _ignored("nodeStatusMaxImages", "node-status-max-images", v.integer, HARMLESS, flag_type=int),
    _ignored("volumeStatsAggPeriod", "volume-stats-agg-period", v.duration, HARMLESS),
    # --- cgroups
    _ignored("kubeletCgroups", "kubelet-cgroups", v.text, "", NO_CGROUP_TREE),
    _ignored("systemCgroups", "system-cgroups", v.text, "", NO_CGROUP_TREE),
    _ignored("", "runtime-cgroups", v.text, "", NO_CGROUP_TREE),
    _ignored("cgroupRoot", "cgroup-root", v.text, "", NO_CGROUP_TREE),
    _ignored("cgroupsPerQOS", "cgroups-per-qos", v.boolean, True),
    _ignored("systemReservedCgroup", "system-reserved-cgroup", v.text, "", NO_CGROUP_TREE),
    _ignored("kubeReservedCgroup", "kube-reserved-cgroup", v.text, "", NO_CGROUP_TREE),
    _ignored("failCgroupV1", "fail-cgroupv1", v.boolean, False, "pykubelet runs on cgroup v1"),
    _ignored("singleProcessOOMKill", "", v.boolean, False),
    _ignored("oomScoreAdj", "oom-score-adj", v.integer, HARMLESS, flag_type=int),
    # --- resource managers and reservations
    _ignored("cpuManagerPolicy", "cpu-manager-policy", v.text, "none", NO_MANAGER),
    _ignored("cpuManagerPolicyOptions", "cpu-manager-policy-options", v.string_map, None, NO_MANAGER),
    _ignored("cpuManagerReconcilePeriod", "cpu-manager-reconcile-period", v.duration, HARMLESS),
    _ignored("memoryManagerPolicy", "memory-manager-policy", v.text, "None", NO_MANAGER),
    _ignored("topologyManagerPolicy", "topology-manager-policy", v.text, "none", NO_MANAGER),
    _ignored("topologyManagerScope", "topology-manager-scope", v.text, "container", NO_MANAGER),
    _ignored("topologyManagerPolicyOptions", "topology-manager-policy-options", v.string_map, None, NO_MANAGER),
    _ignored("qosReserved", "qos-reserved", v.string_map, None, NO_MANAGER),
    _ignored("reservedSystemCPUs", "reserved-cpus", v.text, "", NO_MANAGER),
    _ignored("reservedMemory", "reserved-memory", v.object_list, None, NO_MANAGER,
             flag_type=lambda text: [v.flag_as_object(text)]),
    _ignored("memoryThrottlingFactor", "", v.number, HARMLESS),
    _ignored("memoryReservationPolicy", "", v.text, HARMLESS),
    _ignored("systemReserved", "system-reserved", v.string_map, None,
             "allocatable is capacity less the hard eviction thresholds", repeatable=True),
    _ignored("kubeReserved", "kube-reserved", v.string_map, None,
             "allocatable is capacity less the hard eviction thresholds", repeatable=True),
    _ignored("enforceNodeAllocatable", "enforce-node-allocatable", v.string_list, ["pods"], repeatable=True),
    _ignored("podPidsLimit", "pod-max-pids", v.integer, -1, "pods get no pids limit", flag_type=int),
    _ignored("podsPerCore", "pods-per-core", v.integer, 0, "maxPods alone limits the pods", flag_type=int),
    _ignored("cpuCFSQuota", "cpu-cfs-quota", v.boolean, True),
    _ignored("cpuCFSQuotaPeriod", "cpu-cfs-quota-period", v.duration, 0.1),
    _ignored("maxOpenFiles", "max-open-files", v.integer, HARMLESS, flag_type=int),
    _ignored("localStorageCapacityIsolation", "local-storage-capacity-isolation", v.boolean, HARMLESS),
    _ignored("kernelMemcgNotification", "kernel-memcg-notification", v.boolean, False),
    # --- eviction beyond evictionHard
    _ignored("evictionSoft", "eviction-soft", v.string_map, None, "only evictionHard is read", repeatable=True),
    _ignored("evictionSoftGracePeriod", "eviction-soft-grace-period", v.string_map, None, "only evictionHard is read",
             repeatable=True),
    _ignored("evictionPressureTransitionPeriod", "eviction-pressure-transition-period", v.duration, HARMLESS),
    _ignored("evictionMaxPodGracePeriod", "eviction-max-pod-grace-period", v.integer, HARMLESS, flag_type=int),
    _ignored("evictionMinimumReclaim", "eviction-minimum-reclaim", v.string_map, HARMLESS, repeatable=True),
    _ignored("mergeDefaultEvictionSettings", "", v.boolean, False),
    # --- the node and its pods
    _ignored("hairpinMode", "hairpin-mode", v.text, HARMLESS),
    _ignored("runOnce", "runonce", v.boolean, False),
    _ignored("enableControllerAttachDetach", "enable-controller-attach-detach", v.boolean, True),
    _ignored("protectKernelDefaults", "protect-kernel-defaults", v.boolean, False),
    _ignored("makeIPTablesUtilChains", "make-iptables-util-chains", v.boolean, HARMLESS),
    _ignored("iptablesMasqueradeBit", "", v.integer, HARMLESS),
    _ignored("iptablesDropBit", "", v.integer, HARMLESS),
    _ignored("featureGates", "feature-gates", v.bool_map, None, "pykubelet has no feature gates", repeatable=True),
    _ignored("failSwapOn", "fail-swap-on", v.boolean, False, "pykubelet does not check for swap"),
    _ignored("memorySwap", "", v.mapping),
    _ignored("containerLogMaxSize", "container-log-max-size", v.text, "", "container logs are not rotated"),
    _ignored("containerLogMaxFiles", "container-log-max-files", v.integer, None, "container logs are not rotated",
             flag_type=int),
    _ignored("containerLogMaxWorkers", "", v.integer, HARMLESS),
    _ignored("containerLogMonitorInterval", "", v.duration, HARMLESS),
    _ignored("configMapAndSecretChangeDetectionStrategy", "", v.text, "Watch"),
    _ignored("volumePluginDir", "volume-plugin-dir", v.text, HARMLESS),
    _ignored("shutdownGracePeriod", "", v.duration, None, "pykubelet does not watch for node shutdown"),
    _ignored("shutdownGracePeriodCriticalPods", "", v.duration, None, "pykubelet does not watch for node shutdown"),
    _ignored("shutdownGracePeriodByPodPriority", "", v.object_list, None, "pykubelet does not watch for node shutdown"),
    _ignored("crashLoopBackOff", "", v.mapping, None, "restart back-off is the kubelet's default (10s doubling to 5m)"),
    _ignored("seccompDefault", "seccomp-default", v.boolean, False, "pods without a seccomp profile run Unconfined"),
    _ignored("tracing", "", v.mapping),
    _ignored("userNamespaces", "", v.mapping),
    _ignored("logging.format", "logging-format", v.text, "text", "pykubelet logs text"),
    _ignored("logging.flushFrequency", "log-flush-frequency", v.duration_or_nanoseconds, HARMLESS),
    _ignored("logging.vmodule", "vmodule", v.anything, HARMLESS),
    _ignored("logging.options", "", v.mapping, HARMLESS),
    *(_ignored("", name, parse, HARMLESS) for name, parse in (
        ("log-json-info-buffer-size", v.text), ("log-json-split-stream", v.boolean),
        ("log-text-info-buffer-size", v.text), ("log-text-split-stream", v.boolean))),
    # --- flags without a config field
    _ignored("", "cloud-provider", v.text, "", "pykubelet has no cloud provider integration"),
    _ignored("", "lock-file", v.text, "", "pykubelet takes no lock file"),
    _ignored("", "exit-on-lock-contention", v.boolean, False),
    _ignored("", "minimum-container-ttl-duration", v.duration, HARMLESS),
    _ignored("", "maximum-dead-containers-per-container", v.integer, HARMLESS, flag_type=int),
    _ignored("", "maximum-dead-containers", v.integer, HARMLESS, flag_type=int),
    _ignored("", "experimental-mounter-path", v.text, HARMLESS),
    _ignored("", "experimental-allocatable-ignore-eviction", v.boolean, HARMLESS),
    _ignored("", "housekeeping-interval", v.duration, HARMLESS),
    # cAdvisor's flags, registered with the kubelet by mistake long ago and kept (deprecated)
    *(_ignored("", name, parse, HARMLESS, flag_type=int if parse is v.integer else None) for name, parse in (
        ("application-metrics-count-limit", v.integer), ("boot-id-file", v.text), ("container-hints", v.text),
        ("containerd", v.text), ("containerd-namespace", v.text), ("enable-load-reader", v.boolean),
        ("event-storage-age-limit", v.text), ("event-storage-event-limit", v.text),
        ("global-housekeeping-interval", v.duration), ("log-cadvisor-usage", v.boolean),
        ("machine-id-file", v.text), ("storage-driver-buffer-duration", v.duration),
        ("storage-driver-db", v.text), ("storage-driver-host", v.text), ("storage-driver-password", v.text),
        ("storage-driver-secure", v.boolean), ("storage-driver-table", v.text), ("storage-driver-user", v.text))),
    # removed from the kubelet, still in install guides
    _ignored("", "container-runtime", v.text, None, REMOVED),
    _ignored("", "network-plugin", v.text, None, REMOVED),
    _ignored("", "pod-infra-container-image", v.text, None, REMOVED),
    _ignored("", "image-pull-progress-deadline", v.duration, None, REMOVED),
)
