"""/metrics/cadvisor on the kubelet API: the runtime's own pod and container series (CRI
ListMetricDescriptors, ListPodSandboxMetrics) written as the kubelet's CRI metrics collector writes
them, a real gRPC server on a unix socket playing containerd 2.x (both calls) or 1.6 (neither)."""

from __future__ import annotations

import logging

import grpc
from aiohttp.test_utils import TestClient, TestServer

from pykubelet.config import Settings
from pykubelet.cri.client import CRIClient
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.cri.v1 import api_pb2_grpc as api_grpc
from pykubelet.server.host import Host
from pykubelet.server.prometheus_text import go_float
from pykubelet.server.routes import build_app

KEYS = ["pod", "namespace", "container", "id", "image"]  # containerd's, in its order
STAMP = 1_700_000_000_123_456_789  # nanoseconds: 1700000000123 ms


def metric(name: str, kind: int, labels: list[str], value: int, timestamp: int = STAMP) -> api.Metric:
    return api.Metric(name=name, metric_type=kind, label_values=labels, value=api.UInt64Value(value=value),
                      timestamp=timestamp)


class Runtime2(api_grpc.RuntimeServiceServicer):
    """containerd 2.x: two ready pods, a pod-level network series and per-container CPU and memory,
    among them what the kubelet's collector drops."""

    def __init__(self, unavailable_first: bool = False):
        self.asked = {"descriptors": 0, "metrics": 0}
        self.unavailable_first = unavailable_first

    async def ListMetricDescriptors(self, request, context):
        self.asked["descriptors"] += 1
        if self.unavailable_first and self.asked["descriptors"] == 1:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "containerd is restarting")
        d = api.MetricDescriptor
        return api.ListMetricDescriptorsResponse(descriptors=[
            d(name="container_cpu_usage_seconds_total", help="Cumulative CPU time consumed in seconds.",
              label_keys=KEYS),
            d(name="container_memory_working_set_bytes", help="Amount of memory that is actively used by the "
              "container, excluding cached memory.", label_keys=KEYS),
            d(name="container_network_receive_bytes_total", help="Cumulative count of bytes received",
              label_keys=[*KEYS, "interface"]),
            d(name="runtime_note", help="a\\b\nc", label_keys=["path"]),
            d(name="bad-name", help="not a name the text format can carry", label_keys=[]),
        ])

    async def ListPodSandboxMetrics(self, request, context):
        self.asked["metrics"] += 1
        web = ["web-2", "ns"]
        app, db = [*web, "app", "c2", "nginx:1.27"], ["db-1", "ns", "db", "c1", "postgres:17"]
        cpu, memory = "container_cpu_usage_seconds_total", "container_memory_working_set_bytes"
        return api.ListPodSandboxMetricsResponse(pod_metrics=[
            api.PodSandboxMetrics(
                pod_sandbox_id="sb2",
                metrics=[metric("container_network_receive_bytes_total", api.COUNTER, [*web, "", "sb2", "", "eth0"],
                                4096)],
                container_metrics=[api.ContainerMetrics(container_id="c2", metrics=[
                    metric(cpu, api.COUNTER, app, 12), metric(memory, api.GAUGE, app, 1234567)])]),
            api.PodSandboxMetrics(pod_sandbox_id="sb1", container_metrics=[api.ContainerMetrics(
                container_id="c1", metrics=[
                    metric(cpu, api.COUNTER, db, 3, timestamp=0),  # measured for this request: no stamp
                    metric(memory, api.GAUGE, db, 2**30),
                    metric(cpu, api.COUNTER, db, 99),  # the same labels again
                    metric(cpu, api.COUNTER, db[:4], 5),  # one label value short
                    metric(cpu, 7, [*db[:3], "c9", db[4]], 5),  # no such metric type
                    metric(memory, api.COUNTER, [*db[:3], "c9", db[4]], 5),  # not the gauge the first was
                    metric("container_undescribed", api.GAUGE, db, 1),
                    metric("bad-name", api.GAUGE, [], 1),
                    metric("runtime_note", api.GAUGE, ['say "hi"\\\n'], 7),
                ])]),
        ])


EXPECTED = """\
# HELP container_cpu_usage_seconds_total [INTERNAL] Cumulative CPU time consumed in seconds.
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container="app",id="c2",image="nginx:1.27",namespace="ns",pod="web-2"} 12 1700000000123
container_cpu_usage_seconds_total{container="db",id="c1",image="postgres:17",namespace="ns",pod="db-1"} 3
# HELP container_memory_working_set_bytes [INTERNAL] Amount of memory that is actively used by the container, excluding cached memory.
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container="app",id="c2",image="nginx:1.27",namespace="ns",pod="web-2"} 1.234567e+06 1700000000123
container_memory_working_set_bytes{container="db",id="c1",image="postgres:17",namespace="ns",pod="db-1"} 1.073741824e+09 1700000000123
# HELP container_network_receive_bytes_total [INTERNAL] Cumulative count of bytes received
# TYPE container_network_receive_bytes_total counter
container_network_receive_bytes_total{container="",id="sb2",image="",interface="eth0",namespace="ns",pod="web-2"} 4096 1700000000123
# HELP runtime_note [INTERNAL] a\\\\b\\nc
# TYPE runtime_note gauge
runtime_note{path="say \\"hi\\"\\\\\\n"} 7 1700000000123
"""


class Gate:
    async def check(self, *_):
        return None


async def scrape(tmp_path, runtime: api_grpc.RuntimeServiceServicer, times: int = 1) -> list[tuple[int, str, str]]:
    server = grpc.aio.server()
    api_grpc.add_RuntimeServiceServicer_to_server(runtime, server)
    server.add_insecure_port(f"unix://{tmp_path}/cri.sock")
    await server.start()
    answers = []
    try:
        async with CRIClient(f"unix://{tmp_path}/cri.sock") as cri:
            host = Host(settings=Settings(), cri=cri, node_ips=[], pods=lambda: [])
            async with TestClient(TestServer(build_app(host, Gate()))) as client:  # type: ignore[arg-type]
                for _ in range(times):
                    response = await client.get("/metrics/cadvisor")
                    answers.append((response.status, response.headers["Content-Type"], await response.text()))
    finally:
        await server.stop(None)
    return answers


async def test_containerd_2s_series_are_written_as_the_kubelet_writes_them(tmp_path):
    runtime = Runtime2()
    answers = await scrape(tmp_path, runtime, times=2)
    for status, content_type, page in answers:
        assert status == 200 and content_type == "text/plain; version=0.0.4; charset=utf-8; escaping=underscores"
        assert page == EXPECTED
    # The descriptors are read once and kept; the values are the runtime's at every scrape.
    assert runtime.asked == {"descriptors": 1, "metrics": 2}


async def test_descriptors_the_runtime_could_not_give_are_asked_for_again(tmp_path, caplog):
    runtime = Runtime2(unavailable_first=True)
    with caplog.at_level(logging.WARNING):
        (first, second) = await scrape(tmp_path, runtime, times=2)
    # As the kubelet: the failure is logged and the page has none of the runtime's series.
    assert first[0] == 200 and first[2] == ""
    assert any("containerd is restarting" in r.getMessage() for r in caplog.records)
    assert second == (200, first[1], EXPECTED)
    assert runtime.asked == {"descriptors": 2, "metrics": 1}


async def test_containerd_16_is_told_plainly_and_logged_once(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        answers = await scrape(tmp_path, api_grpc.RuntimeServiceServicer(), times=2)  # UNIMPLEMENTED, both
    reason = "the container runtime does not implement ListPodSandboxMetrics (containerd 2.0 or later does)"
    assert [(status, page) for status, _, page in answers] == [(501, reason + "\n")] * 2
    logged = [r.getMessage() for r in caplog.records if reason in r.getMessage()]
    assert len(logged) == 1, logged


def test_values_are_spelled_as_go_spells_them():
    # strconv.FormatFloat(v, 'g', -1, 64), what the kubelet's text writer uses
    cases = {0.0: "0", 1.0: "1", 5.0: "5", -1.0: "-1", 123456.0: "123456", 1234567.0: "1.234567e+06",
             1e6: "1e+06", 270553174016.0: "2.70553174016e+11", 2.0**64: "1.8446744073709552e+19",
             0.5: "0.5", 0.0001: "0.0001", 0.00001: "1e-05", 1.5e-7: "1.5e-07", 1e100: "1e+100",
             -2.5: "-2.5", 100.25: "100.25", float("nan"): "NaN", float("inf"): "+Inf", float("-inf"): "-Inf"}
    assert {v: go_float(v) for v in cases} == cases
