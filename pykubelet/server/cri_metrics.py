"""/metrics/cadvisor: the pod and container series the runtime measures itself, as the kubelet
serves them when its stats come from CRI (the PodAndContainerStatsFromCRI feature): CRI
ListMetricDescriptors names each series (name, help, label keys), ListPodSandboxMetrics gives
the values of every ready pod and its containers, and each becomes a Prometheus sample exactly
as the kubelet's CRI metrics collector makes it.

containerd 2.0 and later implement both calls on Linux; 1.6 does not. There the page answers
501 with the reason, so that a scraper's target shows down with that message instead of an
empty page that looks healthy.
"""

from __future__ import annotations

from typing import Iterable

from aiohttp import web

from pykubelet.cri import errors
from pykubelet.cri.client import CRIClient
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.server import prometheus_text
from pykubelet.server.prometheus_text import Family, Sample
from pykubelet.util.log import get_logger

log = get_logger(__name__)

LACKING = "the container runtime does not implement ListPodSandboxMetrics (containerd 2.0 or later does)"
_TYPES = {api.COUNTER: "counter", api.GAUGE: "gauge"}


class Descriptor:
    """A series the runtime declared. The kubelet marks the runtime's series INTERNAL (no stability
    promise), which its metrics library writes at the head of their help."""

    def __init__(self, described: api.MetricDescriptor):
        self.name = described.name
        self.help = f"[INTERNAL] {described.help}"
        self.label_keys = tuple(described.label_keys)


def _writable(d: api.MetricDescriptor) -> bool:
    keys = list(d.label_keys)
    return (bool(prometheus_text.METRIC_NAME.match(d.name)) and len(set(keys)) == len(keys)
            and all(prometheus_text.LABEL_NAME.match(k) for k in keys))


def descriptors_by_name(described: Iterable[api.MetricDescriptor]) -> dict[str, Descriptor]:
    """The runtime's descriptors by name; one whose name or label keys the text format cannot
    carry is left out, and so are the values reported under it."""
    out: dict[str, Descriptor] = {}
    for d in described:
        if not _writable(d):
            log.warning("Ignoring a metric descriptor of the runtime with an invalid name or label keys",
                        name=d.name, label_keys=list(d.label_keys))
            continue
        out[d.name] = Descriptor(d)
    return out


def families(descriptors: dict[str, Descriptor], pods: Iterable[api.PodSandboxMetrics]) -> list[Family]:
    """Each pod's metrics, then its containers', as samples of the family their name describes.

    What the kubelet's registry drops is dropped here, each alone: a metric no descriptor names,
    of an unknown type, with more or fewer label values than its descriptor has keys, of another
    type than the first of its name, or with the label values of one already taken.
    """
    by_name: dict[str, Family] = {}
    seen: set[tuple[str, tuple[str, ...]]] = set()
    for pod in pods:
        for metric in [*pod.metrics, *(m for c in pod.container_metrics for m in c.metrics)]:
            described = descriptors.get(metric.name)
            kind = _TYPES.get(metric.metric_type)
            values = tuple(metric.label_values)
            if described is None or kind is None or len(values) != len(described.label_keys):
                log.debug("Dropping a runtime metric its descriptor does not fit", name=metric.name,
                          described=described is not None, metric_type=metric.metric_type)
                continue
            family = by_name.setdefault(metric.name, Family(metric.name, described.help, kind, described.label_keys))
            if family.type != kind or (metric.name, values) in seen:
                log.debug("Dropping a runtime metric of another type or collected before", name=metric.name)
                continue
            seen.add((metric.name, values))
            # A timestamp of 0: the runtime measured it for this request, so the scrape's time holds.
            stamp = metric.timestamp // 1_000_000 if metric.timestamp else None
            family.samples.append(Sample(values, float(metric.value.value), stamp))
    return list(by_name.values())


class CadvisorMetrics:
    """The /metrics/cadvisor handler. The descriptors are asked for until the runtime gives them,
    then kept, as the kubelet keeps the ones it reads at its start; the values are asked for at
    every scrape, and nothing of them is kept."""

    def __init__(self, cri: CRIClient):
        self.cri = cri
        self._descriptors: dict[str, Descriptor] | None = None
        self._told_lacking = False

    async def handle(self, _: web.Request) -> web.Response:
        try:
            if self._descriptors is None:
                self._descriptors = descriptors_by_name(await self.cri.list_metric_descriptors())
            pods = await self.cri.list_pod_sandbox_metrics()
        except errors.Unimplemented:
            if not self._told_lacking:
                self._told_lacking = True
                log.warning("/metrics/cadvisor is not served: " + LACKING)
            return web.Response(status=501, text=LACKING + "\n")
        except errors.CRIError as e:
            # The kubelet logs the failure and serves its page without the runtime's series.
            log.warning("/metrics/cadvisor: cannot read the runtime's metrics", err=str(e))
            pods = []
        body = prometheus_text.render(families(self._descriptors or {}, pods))
        return web.Response(body=body.encode(), headers={"Content-Type": prometheus_text.CONTENT_TYPE})
