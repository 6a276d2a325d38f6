"""The node's local HTTP endpoint: /healthz (is the agent working?), /pods (what it runs) and
/debug (what it did and how it is).

/healthz answers 200 "ok" only while the sync machinery is alive, as the kubelet's does;
`pykubelet pods` reads /pods. /debug/pods/<namespace>/<name> is one pod with its status and its
step history (pods/history.py), what `pykubelet explain pod` tells; /debug/agent is the agent's
own health and its effective settings, what `pykubelet doctor` starts from. Plain HTTP, on the
healthz address (loopback by default), like /pods.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from dataclasses import dataclass
from typing import Any, Callable

from aiohttp import web

from pykubelet.config import Settings
from pykubelet.status.manager import StatusManager


@dataclass(frozen=True)
class Debug:
    """What /debug serves, as callables the agent hands in (the server knows no manager)."""

    history: Callable[[str, str, str], dict[str, Any] | None]
    """(namespace, name, uid) -> the pod's recorded steps, or None."""
    histories: Callable[[], list[dict[str, Any]]]
    """Every pod the history holds (running or recently gone)."""
    agent: Callable[[], dict[str, Any]]
    """The agent's loops, last sync, PLEG relist, network, and its settings (settings_json)."""


def settings_json(settings: Settings) -> dict[str, Any]:
    """The effective settings as plain JSON (every group and field by its attribute name)."""
    return dataclasses.asdict(settings)


def build_app(statuses: StatusManager, health_checks: dict[str, Callable[[], bool]],
              debug: Debug | None = None) -> web.Application:
    async def healthz(_: web.Request) -> web.Response:
        failed = [name for name, check in health_checks.items() if not check()]
        if failed:
            return web.Response(status=500, text=f"[-]{', '.join(failed)} failed\nhealthz check failed\n")
        return web.Response(text="ok")

    async def pods(_: web.Request) -> web.Response:
        return web.json_response(statuses.pod_list())

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/pods", pods)
    if debug is not None:
        _add_debug_routes(app, statuses, debug)
    return app


def _add_debug_routes(app: web.Application, statuses: StatusManager, debug: Debug) -> None:
    async def one_pod(request: web.Request) -> web.Response:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        found = next(((p, s) for p, s in statuses.pods() if (p.namespace, p.name) == (namespace, name)), None)
        obj = None
        if found is not None:
            obj = copy.deepcopy(found[0].raw)
            obj.setdefault("metadata", {}).setdefault("namespace", namespace)
            obj["status"] = found[1]
        history = debug.history(namespace, name, found[0].uid if found else "")
        if obj is None and history is None:
            known = sorted({f"{p.namespace}/{p.name}" for p, _ in statuses.pods()} |
                           {f"{h['namespace']}/{h['name']}" for h in debug.histories()})
            return web.json_response({"error": f"this node has no pod {namespace}/{name}", "pods": known}, status=404)
        return web.json_response({"now": time.time(), "pod": obj, "history": history})

    async def all_pods(_: web.Request) -> web.Response:
        return web.json_response({"now": time.time(), "pods": debug.histories()})

    async def agent(_: web.Request) -> web.Response:
        return web.json_response({"now": time.time(), **debug.agent()})

    app.router.add_get("/debug/pods", all_pods)
    app.router.add_get("/debug/pods/{namespace}/{name}", one_pod)
    app.router.add_get("/debug/agent", agent)


async def serve(app: web.Application, host: str, port: int) -> web.AppRunner:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
