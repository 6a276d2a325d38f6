"""/healthz and /livez (healthzBindAddress), /metrics and /proxyMode (metricsBindAddress).

kube-proxy's health: unhealthy once a queued sync has waited longer than twice syncPeriod without
a successful sync (the rules are falling behind the API). /healthz also wants the node to be
eligible — its Node exists, is not being deleted and not tainted ToBeDeletedByClusterAutoscaler —
so a load balancer stops sending traffic to a node on its way out; /livez does not. The body is
kube-proxy's JSON: lastUpdated, currentTime, nodeEligible, healthy, status by IP family.
"""

from __future__ import annotations

import datetime
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from aiohttp import web

from pykubelet.proxy import metrics
from pykubelet.util.log import get_logger

log = get_logger(__name__)

TO_BE_DELETED_TAINT = "ToBeDeletedByClusterAutoscaler"


def _rfc3339(stamp: float) -> str:
    return datetime.datetime.fromtimestamp(stamp, datetime.timezone.utc).isoformat().replace("+00:00", "Z")


@dataclass
class HealthState:
    timeout: float
    """2 x syncPeriod: how long a queued sync may wait."""
    last_updated: float = 0.0
    oldest_queued: float | None = None
    node: Callable[[], dict[str, Any] | None] = field(default=lambda: None)
    clock: Callable[[], float] = time.time

    def queued(self) -> None:
        if self.oldest_queued is None:
            self.oldest_queued = self.clock()
        metrics.LAST_QUEUED.labels(metrics.IP_FAMILY).set(self.clock())

    def updated(self) -> None:
        self.oldest_queued = None
        self.last_updated = self.clock()

    def healthy(self) -> bool:
        return self.oldest_queued is None or self.clock() - self.oldest_queued < self.timeout

    def node_eligible(self) -> bool:
        node = self.node()
        if node is None or (node.get("metadata") or {}).get("deletionTimestamp"):
            return False
        return not any(t.get("key") == TO_BE_DELETED_TAINT for t in (node.get("spec") or {}).get("taints") or [])

    def body(self, with_node: bool) -> tuple[int, dict[str, Any]]:
        now, healthy = self.clock(), self.healthy()
        doc: dict[str, Any] = {"lastUpdated": _rfc3339(self.last_updated), "currentTime": _rfc3339(now)}
        ok = healthy
        if with_node:
            eligible = self.node_eligible()
            doc["nodeEligible"] = eligible
            ok = healthy and eligible
        doc["healthy"] = healthy
        doc["status"] = {metrics.IP_FAMILY: {"lastUpdated": _rfc3339(self.last_updated), "healthy": healthy}}
        if ok:
            doc["lastUpdated"] = _rfc3339(now)  # kube-proxy reports "now" when all is well
        return (200 if ok else 503), doc


def _json(status: int, doc: dict[str, Any]) -> web.Response:
    return web.Response(status=status, text=json.dumps(doc), content_type="application/json",
                        headers={"X-Content-Type-Options": "nosniff"})


def health_app(state: HealthState) -> web.Application:
    async def healthz(_: web.Request) -> web.Response:
        status, doc = state.body(with_node=True)
        metrics.HEALTHZ.labels(str(status)).inc()
        return _json(status, doc)

    async def livez(_: web.Request) -> web.Response:
        status, doc = state.body(with_node=False)
        metrics.LIVEZ.labels(str(status)).inc()
        return _json(status, doc)

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/livez", livez)
    return app


def metrics_app(state: HealthState, mode: str) -> web.Application:
    async def page(_: web.Request) -> web.Response:
        return web.Response(body=metrics.page(), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    async def proxy_mode(_: web.Request) -> web.Response:
        return web.Response(text=mode)

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/metrics", page)
    app.router.add_get("/proxyMode", proxy_mode)
    app.router.add_get("/healthz", healthz)
    return app


async def serve(app: web.Application, address: str, what: str) -> web.AppRunner:
    """Listen on host:port; the runner, to clean up."""
    host, _, port = address.rpartition(":")
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host.strip("[]"), int(port), reuse_address=True).start()
    log.info(f"Serving {what}", address=address)
    return runner
