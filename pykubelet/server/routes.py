"""The kubelet API's plain HTTP endpoints (everything but the upgrade streams of streaming.py),
behind the one authentication and authorization check every path passes."""

from __future__ import annotations

import json
from typing import Any, Awaitable, Callable

from aiohttp import web

from pykubelet.api.pod_status import pod_list
from pykubelet.cri import errors
from pykubelet.server import configz, container_logs, cri_metrics, metrics_endpoints, node_logs
from pykubelet.server.auth import Denied, Gate
from pykubelet.server.host import Host, container_id, container_status
from pykubelet.server.stats import SummaryProvider
from pykubelet.util import metrics
from pykubelet.util.log import get_logger

log = get_logger(__name__)

DEBUG_PREFIXES = ("/run/", "/exec/", "/attach/", "/portForward/", "/containerLogs/", "/runningpods/", "/logs/")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _text(status: int, body: str) -> web.Response:
    return web.Response(status=status, text=body)


def auth_middleware(gate: Gate, host: Host):
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            await gate.check(request.method, request.path, request.headers,
                             request.transport.get_extra_info("peercert") if request.transport else None)
        except Denied as e:
            response = web.Response(status=e.status, text=e.body, headers=e.headers)
            response.force_close()  # a client refused keeps no connection open here
            return response
        if not host.settings.server.enable_debugging_handlers and request.path.startswith(DEBUG_PREFIXES):
            return _text(405, "Debug endpoints are disabled.")
        if request.path.startswith("/logs/") and not host.settings.server.enable_system_log_handler:
            return _text(404, "404 page not found")
        return await handler(request)
    return middleware


async def running_pods(host: Host) -> dict[str, Any]:
    """The pods as the runtime sees them: name, namespace, UID and running containers only."""
    from pykubelet.cri.v1 import api_pb2 as api
    from pykubelet.runtime import labels

    sandboxes, containers = await host.cri.list_pod_sandbox(), await host.cri.list_containers()
    pods: dict[str, dict[str, Any]] = {}
    for s in sandboxes:
        if s.state == api.SANDBOX_READY:
            pods[s.metadata.uid] = {"metadata": {"name": s.metadata.name, "namespace": s.metadata.namespace,
                                                 "uid": s.metadata.uid, "creationTimestamp": None},
                                    "spec": {"containers": []}, "status": {}}
    for c in containers:
        pod = pods.get(c.labels.get(labels.POD_UID, ""))
        if pod is not None and c.state == api.CONTAINER_RUNNING:
            pod["spec"]["containers"].append({"name": c.metadata.name, "image": c.image.image, "resources": {}})
    return {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": list(pods.values())}


def build_app(host: Host, gate: Gate) -> web.Application:
    summaries = SummaryProvider(host)
    cadvisor_metrics = cri_metrics.CadvisorMetrics(host.cri)
    metrics_endpoints.install_running_collector(host.pods, host.node_name)

    async def healthz(request: web.Request) -> web.Response:
        check = request.match_info.get("check", "")
        checks = {"ping": lambda: True, "log": lambda: True, **host.health_checks}
        if check:
            if check not in checks:
                return _text(404, "404 page not found")
            return _text(200, "ok") if checks[check]() else _text(500, f"internal server error: {check} failed")
        failed = [name for name, ok in checks.items() if not ok()]
        if failed:
            lines = "".join(f"[{'-' if name in failed else '+'}]{name} {'failed' if name in failed else 'ok'}\n"
                            for name in checks)
            return _text(500, f"{lines}healthz check failed\n")
        return _text(200, "ok")

    async def pods(_: web.Request) -> web.Response:
        return web.json_response(pod_list(host.pods()))

    async def runningpods(_: web.Request) -> web.Response:
        return web.json_response(await running_pods(host))

    async def config(_: web.Request) -> web.Response:
        return web.json_response(configz.kubelet_config(host.settings))

    async def summary(request: web.Request) -> web.Response:
        only = request.query.get("only_cpu_and_memory", "").lower() == "true"
        return web.json_response(await summaries.summary(only), dumps=lambda o: json.dumps(o, indent=2))

    async def metrics_page(_: web.Request) -> web.Response:
        return web.Response(body=metrics_endpoints.render(metrics.REGISTRY),
                            headers={"Content-Type": metrics_endpoints.CONTENT_TYPE})

    async def probe_metrics(_: web.Request) -> web.Response:
        return web.Response(body=metrics_endpoints.render(metrics.PROBES_REGISTRY),
                            headers={"Content-Type": metrics_endpoints.CONTENT_TYPE})

    async def resource_metrics(_: web.Request) -> web.Response:
        try:
            data = await summaries.summary(only_cpu_and_memory=True)
        except errors.CRIError as e:
            log.warning("Resource metrics: cannot read stats", err=str(e))
            data = None
        return web.Response(body=metrics_endpoints.resource_metrics(data),
                            headers={"Content-Type": metrics_endpoints.CONTENT_TYPE})

    async def logs(request: web.Request) -> web.StreamResponse:
        return await container_logs.handle(host, request)

    async def run(request: web.Request) -> web.Response:
        found = host.find_pod(request.match_info["namespace"], request.match_info["pod"],
                              request.match_info.get("uid", ""))
        if found is None:
            return _text(404, "pod does not exist")
        cs = container_status(found[1], request.match_info["container"])
        if cs is None or not cs.get("containerID"):
            return _text(500, f'container not found ("{request.match_info["container"]}")')
        command = request.query.get("cmd", "").split(" ")
        try:
            result = await host.cri.exec_sync(container_id(cs["containerID"]), command,
                                              int(host.settings.runtime.request_timeout))
        except errors.CRIError as e:
            return _text(404 if isinstance(e, errors.NotFound) else 500, e.details or str(e))
        return web.Response(body=result.stdout + result.stderr, content_type="text/plain")

    async def stream_on_reused_connection(_: web.Request) -> web.Response:
        return _text(400, "streaming requests must be the first request of their connection")

    app = web.Application(middlewares=[auth_middleware(gate, host)])
    r = app.router
    r.add_get("/healthz", healthz)
    r.add_get("/healthz/{check}", healthz)
    r.add_get("/pods", pods)
    r.add_get("/runningpods/", runningpods)
    r.add_get("/configz", config)
    r.add_route("GET", "/stats/summary", summary)
    r.add_route("POST", "/stats/summary", summary)
    r.add_get("/metrics", metrics_page)
    r.add_get("/metrics/resource", resource_metrics)
    r.add_get("/metrics/probes", probe_metrics)
    r.add_get("/metrics/cadvisor", cadvisor_metrics.handle)
    r.add_get("/containerLogs/{namespace}/{pod}/{container}", logs)
    r.add_get("/logs/{path:.*}", node_logs.handle)
    for pattern in ("/run/{namespace}/{pod}/{container}", "/run/{namespace}/{pod}/{uid}/{container}"):
        r.add_post(pattern, run)
    for prefix in ("/exec/", "/attach/", "/portForward/"):
        r.add_route("*", prefix + "{rest:.*}", stream_on_reused_connection)
    return app
