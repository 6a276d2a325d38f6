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

from pykubelet.config import shapes as s
from pykubelet.config.values import boolean, text
from pykubelet.config.option import HARMLESS, Option


def _ignored(field: str, flag: str, parse, acts_as=None, note: str = "", *, flag_type=None,
             repeatable: bool = False) -> Option:
    return Option("", parse, field, flag, flag_type=flag_type, repeatable=repeatable, acts_as=acts_as, note=note)


NO_CGROUP_TREE = ("pykubelet moves no process of its own or of the system into a cgroup: only pods have "
                  "cgroups, under <cgroupRoot>/kubepods")
NO_MANAGER = "pykubelet has no CPU, memory or topology manager"
REMOVED = "no longer a kubelet flag (removed upstream)"

IGNORED: tuple[Option, ...] = (
    # --- serving
    _ignored("enableServer", "enable-server", boolean, True),
    _ignored("readOnlyPort", "read-only-port", s.integer, 0, "pykubelet serves no read-only port", flag_type=int),
    _ignored("tlsCurvePreferences", "", s.int_list),
    _ignored("enableContentionProfiling", "contention-profiling", boolean, HARMLESS),
    _ignored("enableProfilingHandler", "", boolean, HARMLESS),
    _ignored("enableDebugFlagsHandler", "", boolean, HARMLESS),
    _ignored("enableSystemLogQuery", "", boolean, False),
    _ignored("streamingConnectionIdleTimeout", "streaming-connection-idle-timeout", s.duration, HARMLESS),
    _ignored("showHiddenMetricsForVersion", "", text, HARMLESS),
    # --- static pods from a URL
    _ignored("staticPodURL", "manifest-url", text, "", "static pods come from staticPodPath only"),
    _ignored("staticPodURLHeader", "manifest-url-header", s.mapping, HARMLESS, flag_type=s.flag_as_object),
    _ignored("httpCheckFrequency", "http-check-frequency", s.duration, HARMLESS),
    # --- images
    _ignored("registryPullQPS", "registry-qps", s.integer, HARMLESS, flag_type=int),
    _ignored("registryBurst", "registry-burst", s.integer, HARMLESS, flag_type=int),
    _ignored("serializeImagePulls", "serialize-image-pulls", boolean, HARMLESS),
    _ignored("maxParallelImagePulls", "", s.integer, HARMLESS),
    _ignored("imagePullCredentialsVerificationPolicy", "", text, "", "images are pulled as the pod asks"),
    _ignored("preloadedImagesVerificationAllowlist", "", s.string_list, HARMLESS),
    # --- events and the apiserver client
    _ignored("eventRecordQPS", "event-qps", s.integer, HARMLESS, flag_type=int),
    _ignored("eventBurst", "event-burst", s.integer, HARMLESS, flag_type=int),
    _ignored("contentType", "kube-api-content-type", text, HARMLESS),
    _ignored("nodeStatusMaxImages", "node-status-max-images", s.integer, HARMLESS, flag_type=int),
    _ignored("volumeStatsAggPeriod", "volume-stats-agg-period", s.duration, HARMLESS),
    # --- cgroups
    _ignored("kubeletCgroups", "kubelet-cgroups", text, "", NO_CGROUP_TREE),
    _ignored("systemCgroups", "system-cgroups", text, "", NO_CGROUP_TREE),
    _ignored("", "runtime-cgroups", text, "", NO_CGROUP_TREE),
    _ignored("cgroupsPerQOS", "cgroups-per-qos", boolean, True),
    _ignored("systemReservedCgroup", "system-reserved-cgroup", text, "", NO_CGROUP_TREE),
    _ignored("kubeReservedCgroup", "kube-reserved-cgroup", text, "", NO_CGROUP_TREE),
    _ignored("failCgroupV1", "fail-cgroupv1", boolean, False, "pykubelet runs on cgroup v1 and v2"),
    _ignored("singleProcessOOMKill", "", boolean, False),
    _ignored("oomScoreAdj", "oom-score-adj", s.integer, HARMLESS, flag_type=int),
    # --- resource managers and reservations
    _ignored("cpuManagerPolicy", "cpu-manager-policy", text, "none", NO_MANAGER),
    _ignored("cpuManagerPolicyOptions", "cpu-manager-policy-options", s.string_map, None, NO_MANAGER),
    _ignored("cpuManagerReconcilePeriod", "cpu-manager-reconcile-period", s.duration, HARMLESS),
    _ignored("memoryManagerPolicy", "memory-manager-policy", text, "None", NO_MANAGER),
    _ignored("topologyManagerPolicy", "topology-manager-policy", text, "none", NO_MANAGER),
    _ignored("topologyManagerScope", "topology-manager-scope", text, "container", NO_MANAGER),
    _ignored("topologyManagerPolicyOptions", "topology-manager-policy-options", s.string_map, None, NO_MANAGER),
    _ignored("qosReserved", "qos-reserved", s.string_map, None, NO_MANAGER),
    _ignored("reservedSystemCPUs", "reserved-cpus", text, "", NO_MANAGER),
    _ignored("reservedMemory", "reserved-memory", s.object_list, None, NO_MANAGER,
             flag_type=lambda text: [s.flag_as_object(text)]),
    _ignored("memoryThrottlingFactor", "", s.number, HARMLESS),
    _ignored("memoryReservationPolicy", "", text, HARMLESS),
    _ignored("systemReserved", "system-reserved", s.string_map, None,
             "allocatable is capacity less the hard eviction thresholds", repeatable=True),
    _ignored("kubeReserved", "kube-reserved", s.string_map, None,
             "allocatable is capacity less the hard eviction thresholds", repeatable=True),
    _ignored("enforceNodeAllocatable", "enforce-node-allocatable", s.string_list, ["pods"], repeatable=True),
    _ignored("podPidsLimit", "pod-max-pids", s.integer, -1, "pods get no pids limit", flag_type=int),
    _ignored("podsPerCore", "pods-per-core", s.integer, 0, "maxPods alone limits the pods", flag_type=int),
    _ignored("cpuCFSQuota", "cpu-cfs-quota", boolean, True),
    _ignored("cpuCFSQuotaPeriod", "cpu-cfs-quota-period", s.duration, 0.1),
    _ignored("maxOpenFiles", "max-open-files", s.integer, HARMLESS, flag_type=int),
    _ignored("localStorageCapacityIsolation", "local-storage-capacity-isolation", boolean, HARMLESS),
    _ignored("kernelMemcgNotification", "kernel-memcg-notification", boolean, False),
    # --- eviction
    _ignored("mergeDefaultEvictionSettings", "", boolean, False),
    # --- the node and its pods
    _ignored("hairpinMode", "hairpin-mode", text, HARMLESS),
    _ignored("runOnce", "runonce", boolean, False),
    _ignored("enableControllerAttachDetach", "enable-controller-attach-detach", boolean, True),
    _ignored("protectKernelDefaults", "protect-kernel-defaults", boolean, False),
    _ignored("makeIPTablesUtilChains", "make-iptables-util-chains", boolean, HARMLESS),
    _ignored("iptablesMasqueradeBit", "", s.integer, HARMLESS),
    _ignored("iptablesDropBit", "", s.integer, HARMLESS),
    _ignored("featureGates", "feature-gates", s.bool_map, None, "pykubelet has no feature gates", repeatable=True),
    _ignored("configMapAndSecretChangeDetectionStrategy", "", text, "Watch"),
    _ignored("volumePluginDir", "volume-plugin-dir", text, HARMLESS),
    _ignored("crashLoopBackOff", "", s.mapping, None, "restart back-off is the kubelet's default (10s doubling to 5m)"),
    _ignored("seccompDefault", "seccomp-default", boolean, False, "pods without a seccomp profile run Unconfined"),
    _ignored("tracing", "", s.mapping),
    _ignored("userNamespaces", "", s.mapping),
    _ignored("logging.format", "logging-format", text, "text", "pykubelet logs text"),
    _ignored("logging.flushFrequency", "log-flush-frequency", s.duration_or_nanoseconds, HARMLESS),
    _ignored("logging.vmodule", "vmodule", s.anything, HARMLESS),
    _ignored("logging.options", "", s.mapping, HARMLESS),
    *(_ignored("", name, parse, HARMLESS) for name, parse in (
        ("log-json-info-buffer-size", text), ("log-json-split-stream", boolean),
        ("log-text-info-buffer-size", text), ("log-text-split-stream", boolean))),
    # --- flags without a config field
    _ignored("", "cloud-provider", text, "", "pykubelet has no cloud provider integration"),
    _ignored("", "lock-file", text, "", "pykubelet takes no lock file"),
    _ignored("", "exit-on-lock-contention", boolean, False),
    _ignored("", "minimum-container-ttl-duration", s.duration, HARMLESS),
    _ignored("", "maximum-dead-containers-per-container", s.integer, HARMLESS, flag_type=int),
    _ignored("", "maximum-dead-containers", s.integer, HARMLESS, flag_type=int),
    _ignored("", "experimental-mounter-path", text, HARMLESS),
    _ignored("", "experimental-allocatable-ignore-eviction", boolean, HARMLESS),
    _ignored("", "housekeeping-interval", s.duration, HARMLESS),
    # cAdvisor's flags, registered with the kubelet by mistake long ago and kept (deprecated)
    *(_ignored("", name, parse, HARMLESS, flag_type=int if parse is s.integer else None) for name, parse in (
        ("application-metrics-count-limit", s.integer), ("boot-id-file", text), ("container-hints", text),
        ("containerd", text), ("containerd-namespace", text), ("enable-load-reader", boolean),
        ("event-storage-age-limit", text), ("event-storage-event-limit", text),
        ("global-housekeeping-interval", s.duration), ("log-cadvisor-usage", boolean),
        ("machine-id-file", text), ("storage-driver-buffer-duration", s.duration),
        ("storage-driver-db", text), ("storage-driver-host", text), ("storage-driver-password", text),
        ("storage-driver-secure", boolean), ("storage-driver-table", text), ("storage-driver-user", text))),
    # removed from the kubelet, still in install guides
    _ignored("", "container-runtime", text, None, REMOVED),
    _ignored("", "network-plugin", text, None, REMOVED),
    _ignored("", "pod-infra-container-image", text, None, REMOVED),
    _ignored("", "image-pull-progress-deadline", s.duration, None, REMOVED),
)
