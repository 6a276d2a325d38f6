"""The node's local HTTP endpoint: /healthz (is the agent working?) and /pods (what it runs).

/healthz answers 200 "ok" only while the sync machinery is alive, as the kubelet's does;
`pykubelet pods` reads /pods.
"""

from __future__ import annotations

from typing import Callable

from aiohttp import web

from pykubelet.status.manager import StatusManager


def build_app(statuses: StatusManager, health_checks: dict[str, Callable[[], bool]]) -> web.Application:
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
    return app


async def serve(app: web.Application, host: str, port: int) -> web.AppRunner:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
