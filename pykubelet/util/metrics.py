"""The agent's Prometheus metrics, under the kubelet's names: one registry that every layer records
into (cri/, pleg/, pods/, probes/, kube/) and the kubelet API serves on /metrics.

Prober results live in a registry of their own, served on /metrics/probes as the kubelet does.
Values that are a view of current state (running pods and containers) are not recorded here:
the server adds a collector that computes them at scrape time.
"""

from __future__ import annotations

import re
import time

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# The kubelet's series carry no *_created companions; neither do ours.
prometheus_client.disable_created_metrics()

REGISTRY = CollectorRegistry(auto_describe=True)
PROBES_REGISTRY = CollectorRegistry(auto_describe=True)

NODE_NAME = Gauge("kubelet_node_name", "The node's name. The count is always 1.", ["node"], registry=REGISTRY)
CRI_LOSING_SUPPORT = Gauge("kubelet_cri_losing_support", "the Kubernetes version that the currently running CRI "
                           "implementation will lose support on if not upgraded.", ["version"], registry=REGISTRY)

RUNTIME_OPERATIONS = Counter("kubelet_runtime_operations", "Cumulative number of runtime operations by operation type.",
                             ["operation_type"], registry=REGISTRY)
RUNTIME_OPERATION_ERRORS = Counter("kubelet_runtime_operations_errors",
                                   "Cumulative number of runtime operation errors by operation type.",
                                   ["operation_type"], registry=REGISTRY)
RUNTIME_OPERATION_DURATION = Histogram(
    "kubelet_runtime_operations_duration_seconds", "Duration in seconds of runtime operations. Broken down by operation type.",
    ["operation_type"], buckets=(.005, .0125, .03125, .078125, .1953125, .48828125, 1.220703125, 3.0517578125,
                                 7.62939453125, 19.073486328125, 47.6837158203125, 119.20928955078125),
    registry=REGISTRY)
STARTED_CONTAINERS = Counter("kubelet_started_containers", "Cumulative number of containers started",
                             ["container_type"], registry=REGISTRY)
STARTED_CONTAINER_ERRORS = Counter("kubelet_started_containers_errors",
                                   "Cumulative number of errors when starting containers",
                                   ["code", "container_type"], registry=REGISTRY)

IMAGE_GARBAGE_COLLECTED = Counter("kubelet_image_garbage_collected", "Total number of images garbage collected by "
                                  "the kubelet, whether through disk usage or image age.", ["reason"],
                                  registry=REGISTRY)

PLEG_RELIST_DURATION = Histogram("kubelet_pleg_relist_duration_seconds",
                                 "Duration in seconds for relisting pods in PLEG.", registry=REGISTRY)
PLEG_LAST_SEEN = Gauge("kubelet_pleg_last_seen_seconds",
                       "Timestamp in seconds when PLEG was last seen active.", registry=REGISTRY)

# Whole seconds, as the kubelet sets them; 0 until a shutdown is on record (node/shutdown_state.py)
GRACEFUL_SHUTDOWN_START = Gauge("kubelet_graceful_shutdown_start_time_seconds",
                                "Last graceful shutdown start time since unix epoch in seconds", registry=REGISTRY)
GRACEFUL_SHUTDOWN_END = Gauge("kubelet_graceful_shutdown_end_time_seconds",
                              "Last graceful shutdown end time since unix epoch in seconds", registry=REGISTRY)

POD_WORKER_DURATION = Histogram("kubelet_pod_worker_duration_seconds",
                                "Duration in seconds to sync a single pod. Broken down by operation type: "
                                "create, update, or sync", ["operation_type"], registry=REGISTRY)
POD_START_DURATION = Histogram(
    "kubelet_pod_start_duration_seconds",
    "Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run",
    buckets=(0.5, 1, 2, 3, 4, 5, 6, 8, 10, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800,
             2700, 3600), registry=REGISTRY)

REST_CLIENT_REQUESTS = Counter("rest_client_requests", "Number of HTTP requests, partitioned by status code, method, "
                               "and host.", ["code", "method", "host"], registry=REGISTRY)

PROBE_LABELS = ("probe_type", "result", "container", "pod", "namespace", "pod_uid")
PROBES = Counter("prober_probe", "Cumulative number of a liveness, readiness or startup probe for a container by "
                 "result.", PROBE_LABELS, registry=PROBES_REGISTRY)
PROBE_TYPES = {"livenessProbe": "Liveness", "readinessProbe": "Readiness", "startupProbe": "Startup"}

PER_POD: tuple[tuple[Counter, tuple[str, ...]], ...] = ((PROBES, PROBE_LABELS),)
"""The metrics (with their label names) whose series are labelled with a pod's `pod_uid`:
forget_pod removes them when the pod is gone."""

_started_pods: set[str] = set()
"""Pods already counted in kubelet_pod_start_duration_seconds (each counts once)."""


def operation_type(rpc: str) -> str:
    """The kubelet's operation_type label of a CRI RPC: RunPodSandbox -> run_podsandbox."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", rpc.replace("PodSandbox", "Podsandbox")).lower()


def observe_pod_running(uid: str, first_seen: float, phase: str) -> None:
    """Record kubelet_pod_start_duration_seconds the first time a pod is seen Running."""
    if phase == "Running" and uid not in _started_pods:
        _started_pods.add(uid)
        POD_START_DURATION.observe(max(0.0, time.time() - first_seen))


def forget_pod(uid: str) -> None:
    """The pod is gone from the node: drop every series labelled with it, so a node running many
    short-lived pods does not serve (and hold) a series for each pod it ever ran."""
    _started_pods.discard(uid)
    for metric, names in PER_POD:
        for values in {tuple(sample.labels[name] for name in names) for family in metric.collect()
                       for sample in family.samples if sample.labels.get("pod_uid") == uid}:
            metric.remove(*values)


def observe_probe(kind: str, ok: bool, container: str, pod: str, namespace: str, uid: str) -> None:
    PROBES.labels(PROBE_TYPES.get(kind, kind), "successful" if ok else "failed", container, pod, namespace,
                  uid).inc()


def observe_relist(seconds: float, finished_at: float) -> None:
    PLEG_RELIST_DURATION.observe(seconds)
    PLEG_LAST_SEEN.set(finished_at)
