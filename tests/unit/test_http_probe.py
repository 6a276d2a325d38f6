"""httpGet probes against a small HTTP server on loopback: status codes, and redirects followed on
the same host only (a redirect elsewhere passes, with a warning), as the kubelet's prober."""

from __future__ import annotations

from aiohttp import web

from pykubelet.api.probe import HTTPGetAction, Probe
from pykubelet.probes.check import run_probe


async def serve(aiohttp_routes) -> tuple[web.AppRunner, int]:
    app = web.Application()
    app.add_routes(aiohttp_routes)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]


def probe(path: str, port: int) -> Probe:
    return Probe(HTTPGetAction(port=port, path=path), timeout_seconds=2)


async def test_redirects_are_followed_on_the_same_host_but_not_elsewhere():
    hops = []

    async def healthz(request):
        return web.Response(status=500, text="broken")

    async def redirect(request):
        hops.append(request.query["loc"])
        raise web.HTTPFound(request.query["loc"])

    async def loop(request):
        raise web.HTTPFound("/loop")

    runner, port = await serve([web.get("/healthz", healthz), web.get("/redirect", redirect), web.get("/loop", loop)])
    try:
        ok, message = await run_probe(None, probe("/redirect?loc=%2Fhealthz", port), (), "", "127.0.0.1")
        assert (ok, message) == (False, "HTTP probe failed with statuscode: 500 broken")  # followed to /healthz
        ok, message = await run_probe(None, probe("/redirect?loc=" + "http%3A%2F%2F0.0.0.0%2F", port), (), "",
                                      "127.0.0.1")
        assert ok and message.startswith("Probe terminated redirects, Response body: ")  # not followed
        assert hops == ["/healthz", "http://0.0.0.0/"]
        ok, message = await run_probe(None, probe("/loop", port), (), "", "127.0.0.1")
        assert not ok and "stopped after 10 redirects" in message
    finally:
        await runner.cleanup()
