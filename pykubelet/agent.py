"""The agent's lifecycle, in four phases: build the parts, start their loops, wait until one dies
(or the agent is cancelled), stop (Agent.run).

Phase build is assembly/parts.py: every part is made there, in dependency order, and gets what it
needs when it is made. This file runs what it made: the servers and loops start here, and stop
here in reverse. Stopping the agent (SIGTERM, or any of its loops dying) never stops a pod:
containers keep running under containerd, and the next agent adopts them from their CRI labels.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any, Awaitable, Callable

from pykubelet import KUBELET_VERSION
from pykubelet.assembly.parts import Parts, build
from pykubelet.config import Settings
from pykubelet.cri.client import CRIClient
from pykubelet.pleg.relist import HEALTHY_WITHIN_SECONDS
from pykubelet.server import local
from pykubelet.util.fdlimit import raise_open_files_limit
from pykubelet.util.log import get_logger
from pykubelet.util.unix_http import agent_socket
from pykubelet.util.sd_notify import Notifier, WatchdogError
from pykubelet.util.tasks import LoopDied, Tasks

log = get_logger(__name__)

__all__ = ["Agent", "LoopDied"]


class Agent:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.ready = asyncio.Event()
        self.tasks = Tasks()
        self._closers: list[Callable[[], Awaitable[None]]] = []  # the servers phase start opened

    async def run(self) -> None:
        s = self.settings
        raise_open_files_limit()
        try:
            systemd = Notifier()
        except WatchdogError as e:
            raise LoopDied(str(e)) from None
        cri = CRIClient(s.runtime.endpoint, s.runtime.image_endpoint, slow_timeout=s.runtime.request_timeout)
        parts: Parts | None = None
        try:
            parts = await build(s, cri, self.tasks.alive)  # phase build
            await self._start(parts)
            self.tasks.once("systemd-notify", self._notify_systemd(parts, systemd))
            self.ready.set()
            raise await self.tasks.first_death()  # phase wait
        finally:
            systemd.stopping("stopping; pods keep running")
            await self._stop(parts)
            await cri.close()  # once the sandboxes and containers being created are made (cri/client.py)

    async def _notify_systemd(self, p: Parts, systemd: Notifier) -> None:
        """READY=1 once the agent serves and has synced: its servers listen (phase start), the
        runtime has been listed and the static pods read. Not the apiserver's pods: under
        kubeadm init the apiserver is one of this node's static pods. Then the watchdog, if set."""
        await p.pods.wake.pleg.relisted.wait()
        if p.static_source is not None:
            await p.static_source.ready.wait()
        systemd.ready(f"serving; {len(p.pods.dispatcher.workers)} pods")
        if systemd.enabled:
            log.info("Told systemd the agent is ready", watchdog_seconds=systemd.watchdog_seconds)
        if systemd.watchdog_seconds:
            await systemd.watchdog(lambda: all(check() for check in p.health.values()))

    async def _start(self, p: Parts) -> None:
        """Phase start: the kubelet API listens (before the Node registers), then every loop runs."""
        s = self.settings
        if s.server.port:
            await self._serve_kubelet_api(p)
        p.start(self.tasks, s)
        if s.server.healthz_port:
            self._closers.append(await local.serve_healthz(local.build_healthz_app(dict(p.health)),
                                                           s.server.healthz_bind_address, s.server.healthz_port))
        try:
            self._closers.append(await local.serve_socket(local.build_debug_app(p.pods.statuses, self._debug(p)),
                                                          agent_socket(s.root_dir)))
        except OSError as e:
            raise LoopDied(f"cannot serve /pods and /debug on {agent_socket(s.root_dir)}: {e}") from None

    async def _serve_kubelet_api(self, p: Parts) -> None:
        from pykubelet.server import kubelet_api
        from pykubelet.server.host import Host

        s, kube = self.settings, p.kube
        review = (lambda path, body: kube.create(path, body)) if kube is not None else None
        context = None
        if s.server.server_tls_bootstrap:
            from pykubelet.node.status import addresses

            context, rotation = await kubelet_api.tls.bootstrapped_serving(
                s, kube, lambda: addresses(p.node_ip, s.node_name))
            self.tasks.loop("serving-certificate-rotation", rotation.run())
        volume_stats = None
        if p.api_clients is not None and p.api_clients.csi is not None:
            from pykubelet.volumes.csi.volume_stats import CsiVolumeStats

            volume_stats = CsiVolumeStats(p.api_clients.csi.drivers,
                                          p.pods.deps.syncer.api_volumes.claims.csi_in_use).pods
        try:
            server = await kubelet_api.start(Host(s, p.cri, [p.node_ip], p.pods.statuses.pods, dict(p.health),
                                                  review, volume_stats), context)
        except (kubelet_api.BindError, kubelet_api.tls.TLSError) as e:
            raise LoopDied(str(e)) from None
        self._closers.append(server.close)

    def _debug(self, p: Parts) -> local.Debug:
        """What /debug serves: the pods' step history, and the agent's own state for `pykubelet doctor`."""
        s, history, pleg, network, node, dispatcher = (self.settings, p.pods.history, p.pods.wake.pleg, p.network,
                                                       p.node, p.pods.dispatcher)
        started = time.time()

        def agent() -> dict[str, Any]:
            loops = {name: {"alive": not task.done(), "error": "" if not task.done() or task.cancelled()
                            else repr(task.exception())} for name, task in self.tasks.loops.items()}
            return {"pid": os.getpid(), "started_at": started, "version": KUBELET_VERSION, "node": s.node_name,
                    "settings": local.settings_json(s), "loops": loops, "last_sync": history.last_sync,
                    "pods": len(dispatcher.workers),
                    "pleg": {"last_relist": pleg.last_relist, "healthy": pleg.healthy(),
                             "threshold_seconds": HEALTHY_WITHIN_SECONDS},
                    "network": {"mode": s.network.mode, "ready": network.ready.is_set(), "problem": network.problem,
                                "pod_cidr": network.pod_cidr},
                    "node_registered": node.registered.is_set() if node is not None else None}
        return local.Debug(history=history.snapshot, histories=history.pods, agent=agent)

    async def _stop(self, p: Parts | None) -> None:
        """Phase stop: the loops, the servers, then the workers and probes (never their pods) and the
        connections. `p` is None when phase build failed: it closed what it had opened."""
        await self.tasks.stop()
        for close in reversed(self._closers):
            await close()
        self._closers.clear()
        if p is not None:
            await p.stop()
