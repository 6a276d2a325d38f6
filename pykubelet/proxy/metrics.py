"""The proxy's Prometheus metrics, under kube-proxy's names and labels, in a registry of its own
(served on the metrics address's /metrics). Only IPv4 is proxied: ip_family is always "IPv4"."""

from __future__ import annotations

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

prometheus_client.disable_created_metrics()  # kube-proxy's series have no *_created companions

REGISTRY = CollectorRegistry(auto_describe=True)
IP_FAMILY = "IPv4"
_SYNC_BUCKETS = tuple(0.001 * 2 ** i for i in range(15))  # kube-proxy's ExponentialBuckets(0.001, 2, 15)

SYNC_DURATION = Histogram("kubeproxy_sync_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds",
                          ["ip_family"], buckets=_SYNC_BUCKETS, registry=REGISTRY)
SYNC_FULL_DURATION = Histogram("kubeproxy_sync_full_proxy_rules_duration_seconds",
                               "SyncProxyRules latency in seconds for full resyncs", ["ip_family"],
                               buckets=_SYNC_BUCKETS, registry=REGISTRY)
SYNC_PARTIAL_DURATION = Histogram("kubeproxy_sync_partial_proxy_rules_duration_seconds",
                                  "SyncProxyRules latency in seconds for partial resyncs", ["ip_family"],
                                  buckets=_SYNC_BUCKETS, registry=REGISTRY)
LAST_SYNC = Gauge("kubeproxy_sync_proxy_rules_last_timestamp_seconds",
                  "The last time proxy rules were successfully synced", ["ip_family"], registry=REGISTRY)
LAST_QUEUED = Gauge("kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
                    "The last time a sync of proxy rules was queued", ["ip_family"], registry=REGISTRY)
ENDPOINT_CHANGES = Counter("kubeproxy_sync_proxy_rules_endpoint_changes_total",
                           "Cumulative proxy rules Endpoint changes", registry=REGISTRY)
SERVICE_CHANGES = Counter("kubeproxy_sync_proxy_rules_service_changes_total",
                          "Cumulative proxy rules Service changes", registry=REGISTRY)
NO_LOCAL_ENDPOINTS = Gauge("kubeproxy_sync_proxy_rules_no_local_endpoints_total",
                           "Number of services with a Local traffic policy and no endpoints",
                           ["traffic_policy", "ip_family"], registry=REGISTRY)
IPTABLES_RESTORE_FAILURES = Counter("kubeproxy_sync_proxy_rules_iptables_restore_failures_total",
                                    "Cumulative proxy iptables restore failures", ["ip_family"], registry=REGISTRY)
IPTABLES_PARTIAL_RESTORE_FAILURES = Counter("kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total",
                                            "Cumulative proxy iptables partial restore failures", ["ip_family"],
                                            registry=REGISTRY)
IPTABLES_RULES_TOTAL = Gauge("kubeproxy_sync_proxy_rules_iptables_total",
                             "Total number of iptables rules owned by kube-proxy", ["table", "ip_family"],
                             registry=REGISTRY)
IPTABLES_RULES_LAST = Gauge("kubeproxy_sync_proxy_rules_iptables_last",
                            "Number of iptables rules written by kube-proxy in last sync", ["table", "ip_family"],
                            registry=REGISTRY)
NFTABLES_SYNC_FAILURES = Counter("kubeproxy_sync_proxy_rules_nftables_sync_failures_total",
                                 "Cumulative proxy nftables sync failures", ["ip_family"], registry=REGISTRY)
CONNTRACK_DURATION = Histogram("kubeproxy_conntrack_reconciler_sync_duration_seconds",
                               "ReconcileConntrackFlowsLatency latency in seconds", ["ip_family"],
                               buckets=_SYNC_BUCKETS, registry=REGISTRY)
CONNTRACK_DELETED = Counter("kubeproxy_conntrack_reconciler_deleted_entries_total",
                            "Cumulative conntrack flows deleted by conntrack reconciler", ["ip_family"],
                            registry=REGISTRY)
HEALTHZ = Counter("kubeproxy_proxy_healthz_total", "Cumulative proxy healthz HTTP status", ["code"],
                  registry=REGISTRY)
LIVEZ = Counter("kubeproxy_proxy_livez_total", "Cumulative proxy livez HTTP status", ["code"], registry=REGISTRY)


def observe_sync(seconds: float, full: bool) -> None:
    SYNC_DURATION.labels(IP_FAMILY).observe(seconds)
    (SYNC_FULL_DURATION if full else SYNC_PARTIAL_DURATION).labels(IP_FAMILY).observe(seconds)


def page() -> bytes:
    return prometheus_client.generate_latest(REGISTRY)
