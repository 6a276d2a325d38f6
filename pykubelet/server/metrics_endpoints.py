"""/metrics, /metrics/resource and /metrics/probes in the Prometheus text format.

/metrics is the shared registry (util/metrics.py) plus what is a view of the moment: the running
pods and containers. /metrics/resource is the series metrics-server scrapes, made at each scrape
from the same numbers as /stats/summary, each sample stamped with when it was measured.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Callable, Iterable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from pykubelet.api.pod import Pod
from pykubelet.util import metrics

CONTENT_TYPE = CONTENT_TYPE_LATEST


class RunningCollector(Collector):
    """kubelet_running_pods and kubelet_running_containers{container_state}, from the pod statuses."""

    def __init__(self, pods: Callable[[], list[tuple[Pod, dict[str, Any]]]]):
        self.pods = pods

    def collect(self) -> Iterable[Metric]:
        running_pods = 0
        states = {"running": 0, "exited": 0, "created": 0, "unknown": 0}
        for _, status in self.pods():
            statuses = (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or [])
            if status.get("phase") == "Running":
                running_pods += 1
            for cs in statuses:
                state = cs.get("state") or {}
                if "running" in state:
                    states["running"] += 1
                elif "terminated" in state:
                    states["exited"] += 1
                elif cs.get("containerID"):
                    states["created"] += 1
        yield GaugeMetricFamily("kubelet_running_pods", "Number of pods that have a running pod sandbox",
                                value=running_pods)
        family = GaugeMetricFamily("kubelet_running_containers", "Number of containers currently running",
                                   labels=["container_state"])
        for state, count in states.items():
            family.add_metric([state], count)
        yield family


_installed: list[RunningCollector] = []


def install_running_collector(pods: Callable[[], list[tuple[Pod, dict[str, Any]]]], node_name: str) -> None:
    """Count this API's pods in the shared registry (replacing an earlier server's collector)."""
    metrics.NODE_NAME.labels(node_name).set(1)
    while _installed:
        metrics.REGISTRY.unregister(_installed.pop())
    _installed.append(RunningCollector(pods))
    metrics.REGISTRY.register(_installed[0])


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)


def _stamp(value: str | None) -> float | None:
    try:
        return datetime.fromisoformat(value).timestamp() if value else None
    except ValueError:
        return None


class _SummaryCollector(Collector):
    def __init__(self, summary: dict[str, Any] | None):
        self.summary = summary

    def collect(self) -> Iterable[Metric]:
        summary = self.summary or {}
        node = summary.get("node") or {}
        node_cpu = CounterMetricFamily("node_cpu_usage_seconds", "[STABLE] Cumulative cpu time consumed by the node "
                                       "in core-seconds")
        node_mem = GaugeMetricFamily("node_memory_working_set_bytes", "[STABLE] Current working set of the node in "
                                     "bytes")
        if "cpu" in node:
            node_cpu.add_metric([], node["cpu"]["usageCoreNanoSeconds"] / 1e9, timestamp=_stamp(node["cpu"]["time"]))
        if "memory" in node:
            node_mem.add_metric([], node["memory"]["workingSetBytes"], timestamp=_stamp(node["memory"]["time"]))
        pod_labels, container_labels = ["namespace", "pod"], ["container", "namespace", "pod"]
        c_cpu = CounterMetricFamily("container_cpu_usage_seconds", "[STABLE] Cumulative cpu time consumed by the "
                                    "container in core-seconds", labels=container_labels)
        c_mem = GaugeMetricFamily("container_memory_working_set_bytes", "[STABLE] Current working set of the "
                                  "container in bytes", labels=container_labels)
        c_start = GaugeMetricFamily("container_start_time_seconds", "[STABLE] Start time of the container since "
                                    "unix epoch in seconds", labels=container_labels)
        p_cpu = CounterMetricFamily("pod_cpu_usage_seconds", "[STABLE] Cumulative cpu time consumed by the pod in "
                                    "core-seconds", labels=pod_labels)
        p_mem = GaugeMetricFamily("pod_memory_working_set_bytes", "[STABLE] Current working set of the pod in bytes",
                                  labels=pod_labels)
        for pod in summary.get("pods") or []:
            ref = pod["podRef"]
            for c in pod.get("containers") or []:
                values = [c["name"], ref["namespace"], ref["name"]]
                c_cpu.add_metric(values, c["cpu"]["usageCoreNanoSeconds"] / 1e9, timestamp=_stamp(c["cpu"]["time"]))
                c_mem.add_metric(values, c["memory"]["workingSetBytes"], timestamp=_stamp(c["memory"]["time"]))
                started = _stamp(c.get("startTime"))
                if started is not None:
                    c_start.add_metric(values, started, timestamp=started)
            if "cpu" in pod:
                p_cpu.add_metric([ref["namespace"], ref["name"]], pod["cpu"]["usageCoreNanoSeconds"] / 1e9,
                                 timestamp=_stamp(pod["cpu"]["time"]))
                p_mem.add_metric([ref["namespace"], ref["name"]], pod["memory"]["workingSetBytes"],
                                 timestamp=_stamp(pod["memory"]["time"]))
        yield from (node_cpu, node_mem, c_cpu, c_mem, c_start, p_cpu, p_mem)
        yield GaugeMetricFamily("scrape_error", "[ALPHA] 1 if there was an error while getting container metrics, "
                                "0 otherwise", value=0 if self.summary is not None else 1)
        yield GaugeMetricFamily("resource_scrape_error", "[STABLE] 1 if there was an error while getting container "
                                "metrics, 0 otherwise", value=0 if self.summary is not None else 1)


def resource_metrics(summary: dict[str, Any] | None) -> bytes:
    """The /metrics/resource page for a summary (None: the stats could not be read)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_SummaryCollector(summary))
    return generate_latest(registry)
