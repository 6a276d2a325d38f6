"""Wiring and lifecycle: builds the managers, runs their loops as named tasks, stops cleanly.

Stopping the agent (SIGTERM, or any of its loops dying) never stops a pod: containers keep
running under containerd, and the next agent adopts them from their CRI labels.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable

import tenacity

from pykubelet.config import Settings
from pykubelet.cri import errors
from pykubelet.cri.client import CRIClient
from pykubelet.pleg.relist import RelistPLEG
from pykubelet.pods.dispatcher import PodDispatcher
from pykubelet.pods.sync import PodSyncer
from pykubelet.runtime.images import ImageManager
from pykubelet.server import local
from pykubelet.sources.static_files import StaticPodSource
from pykubelet.status.manager import StatusManager
from pykubelet.util.backoff import Backoff
from pykubelet.util.hostip import default_route_ip
from pykubelet.util.log import get_logger

log = get_logger(__name__)

HOUSEKEEPING_SECONDS = 2.0  # the kubelet's housekeeping period


class LoopDied(RuntimeError):
    """One of the agent's long-running loops ended; the agent stops (pods keep running)."""


async def wait_for_runtime(cri: CRIClient) -> str:
    """Block until the runtime answers Version; returns "<name>://<version>"."""
    async for attempt in tenacity.AsyncRetrying(
            retry=tenacity.retry_if_exception_type(errors.CRIError),
            wait=tenacity.wait_exponential(multiplier=0.2, max=10),
            before_sleep=lambda state: log.warning(
                "Container runtime not answering yet; retrying", endpoint=cri.endpoint,
                err=str(state.outcome.exception()) if state.outcome else "")):
        with attempt:
            version = await cri.version()
    return f"{version.runtime_name}://{version.runtime_version}"


class Agent:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.ready = asyncio.Event()
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def _spawn(self, name: str, coro: Awaitable[None]) -> None:
        self._tasks[name] = asyncio.create_task(coro, name=name)  # type: ignore[arg-type]

    def _loops_alive(self) -> bool:
        return all(not t.done() for t in self._tasks.values())

    async def run(self) -> None:
        s = self.settings
        cri = CRIClient(s.runtime.endpoint, s.runtime.image_endpoint, slow_timeout=s.runtime.request_timeout)
        runner = None
        dispatcher = None
        try:
            runtime = await wait_for_runtime(cri)
            log.info("Connected to the container runtime", endpoint=s.runtime.endpoint, runtime=runtime,
                     node=s.node_name)
            host_ip = await default_route_ip()
            statuses = StatusManager()
            syncer = PodSyncer(cri, ImageManager(cri, Backoff()), Backoff(), s.pods.pod_logs_dir)
            dispatcher = PodDispatcher(cri, syncer, statuses, lambda: host_ip, s.pods.sync_frequency,
                                       s.pods.max_pods)
            pleg = RelistPLEG(cri, dispatcher.wake)
            sources_ready: list[asyncio.Event] = []
            if s.pods.static_pod_path:
                source = StaticPodSource(s.pods.static_pod_path, s.node_name, s.pods.file_check_frequency,
                                         dispatcher.set_pods)
                sources_ready.append(source.ready)
                self._spawn("static-pod-source", source.run())
            self._spawn("pleg", pleg.run())
            self._spawn("housekeeping", self._housekeeping(dispatcher, pleg, sources_ready))
            if s.server.healthz_port:
                app = local.build_app(statuses, {"pleg": pleg.healthy, "syncloop": self._loops_alive})
                runner = await local.serve(app, s.server.healthz_bind_address, s.server.healthz_port)
            self.ready.set()
            done, _ = await asyncio.wait(self._tasks.values(), return_when=asyncio.FIRST_COMPLETED)
            task = done.pop()
            raise LoopDied(f"loop {task.get_name()} ended: {task.exception() or 'returned'}")
        finally:
            for task in self._tasks.values():
                task.cancel()
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)
            if dispatcher is not None:
                await dispatcher.stop()
            if runner is not None:
                await runner.cleanup()
            await cri.close()

    async def _housekeeping(self, dispatcher: PodDispatcher, pleg: RelistPLEG,
                            sources_ready: list[asyncio.Event]) -> None:
        # Only once every source has spoken, or pods not yet read would count as orphans.
        for event in sources_ready:
            await event.wait()
        while True:
            await pleg.relisted.wait()
            dispatcher.housekeeping(pleg.runtime_uids, pleg.snapshot_time)
            await asyncio.sleep(HOUSEKEEPING_SECONDS)
