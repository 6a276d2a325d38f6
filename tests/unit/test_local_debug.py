"""The local endpoint's /debug: one pod with its status and recorded steps, what explain reads."""

from __future__ import annotations

from aiohttp.test_utils import TestClient, TestServer

from pykubelet.api.pod import parse_pod
from pykubelet.api.pod_status import PodStatus
from pykubelet.pods.history import PodHistory
from pykubelet.server import local
from pykubelet.status.manager import StatusManager


def web_pod():
    return parse_pod({"metadata": {"name": "web", "namespace": "shop", "uid": "u1"},
                      "spec": {"containers": [{"name": "app", "image": "busybox:1.36"}]}}, where="test")


async def test_debug_serves_a_pod_with_its_steps_and_lists_the_known_ones_for_an_unknown_name():
    statuses, history = StatusManager(), PodHistory()
    pod = web_pod()
    statuses.set(pod, PodStatus(phase="Pending"))
    history.admitted(pod, [])
    history.container_failed(pod, "app", "CreateContainerConfigError", 'configmap "cfg" not found', 10)
    debug = local.Debug(history=history.snapshot, histories=history.pods, agent=lambda: {"node": "n1", "pid": 7})
    async with TestClient(TestServer(local.build_debug_app(statuses, debug))) as client:
        response = await client.get("/debug/pods/shop/web")
        assert response.status == 200
        doc = await response.json()
        assert doc["pod"]["status"]["phase"] == "Pending" and doc["pod"]["metadata"]["uid"] == "u1"
        assert [s["kind"] for s in doc["history"]["steps"]] == ["admission", "container"]
        assert doc["history"]["steps"][1]["details"]["reason"] == "CreateContainerConfigError"
        response = await client.get("/debug/pods/shop/nosuch")
        assert response.status == 404
        assert await response.json() == {"error": "this node has no pod shop/nosuch", "pods": ["shop/web"]}
        agent = await (await client.get("/debug/agent")).json()
        assert agent["node"] == "n1" and agent["now"] > 0


async def test_without_debug_sources_there_is_no_debug_path():
    async with TestClient(TestServer(local.build_debug_app(StatusManager()))) as client:
        assert (await client.get("/debug/agent")).status == 404
        assert (await client.get("/pods")).status == 200


async def test_the_healthz_port_serves_healthz_and_its_checks_and_no_pod_data():
    healthy = {"pleg": True}
    async with TestClient(TestServer(local.build_healthz_app({"pleg": lambda: healthy["pleg"]}))) as client:
        assert (await client.get("/healthz")).status == 200
        assert (await client.get("/healthz/pleg")).status == 200
        assert (await client.get("/healthz/nosuch")).status == 404
        for path in ("/pods", "/debug/pods", "/debug/agent", "/debug/pods/shop/web"):
            assert (await client.get(path)).status == 404, path
        healthy["pleg"] = False
        response = await client.get("/healthz")
        assert response.status == 500 and "[-]pleg failed" in await response.text()
        assert (await client.get("/healthz/pleg")).status == 500
