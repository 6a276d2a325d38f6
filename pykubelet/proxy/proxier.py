"""What one sync is: the watches' objects -> Service ports -> the backend (iptables, nftables or IPVS).

Full or partial: the first sync, the one after a failure, and the periodic one (every syncPeriod)
are full; a sync that a change asked for writes only the Service ports that differ from the last
successful sync. After a sync that changed a UDP Service's endpoints, stale UDP flows are cleared (conntrack.py).
Large clusters (more than 1,000 endpoints, kube-proxy's threshold) skip the
periodic full rewrite, as kube-proxy does: their periodic sync checks that the rules are still in
the kernel and rewrites them all only if not, or once an hour. Nothing is synced before both
Services and EndpointSlices have been listed once, so a restart never programs a partial view
(and never removes the rules of Services it has not seen yet).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Protocol

from pykubelet.proxy import conntrack, metrics
from pykubelet.proxy.health import HealthState
from pykubelet.proxy.inputs import Inputs, Objects
from pykubelet.proxy.model import ServicePort, ServicePortName
from pykubelet.util.log import get_logger

log = get_logger(__name__)

LARGE_CLUSTER_ENDPOINTS = 1000
FULL_SYNC_PERIOD = 3600.0


class Backend(Protocol):
    mode: str

    async def sync(self, ports: dict[ServicePortName, ServicePort], changed: set[ServicePortName] | None,
                   large: bool) -> dict[ServicePortName, Any]: ...

    async def lost_rules(self) -> bool: ...


class Proxier:
    def __init__(self, backend: Backend, inputs: Inputs, services: Callable[[], Objects],
                 slices: Callable[[], Objects], ready: Callable[[], bool], health: HealthState):
        self.backend = backend
        self.inputs = inputs
        self.services, self.slices, self.ready = services, slices, ready
        self.health = health
        self.need_full = True
        self._synced: dict[ServicePortName, ServicePort] = {}
        self._last_full = 0.0

    def changed(self, ports: dict[ServicePortName, ServicePort]) -> set[ServicePortName]:
        """The ports whose rules differ from the last sync's (new, gone or different)."""
        old = self._synced
        out = {n for n in ports.keys() | old.keys() if ports.get(n) != old.get(n)}
        for name in out:
            before, after = old.get(name), ports.get(name)
            if before is not None and after is not None and \
                    dataclasses.replace(before, endpoints=()) == dataclasses.replace(after, endpoints=()):
                metrics.ENDPOINT_CHANGES.inc()
            else:
                metrics.SERVICE_CHANGES.inc()
        return out

    async def sync(self, periodic: bool) -> bool:
        if not self.ready():
            log.debug("Not syncing until Services and EndpointSlices have been listed")
            return True
        started = time.monotonic()
        ports = self.inputs.service_ports(self.services(), self.slices())
        large = sum(len(p.endpoints) for p in ports.values()) > LARGE_CLUSTER_ENDPOINTS
        full = self.need_full
        if periodic and not full:
            full = (not large or started - self._last_full > FULL_SYNC_PERIOD or await self.backend.lost_rules())
        changed = self.changed(ports)
        try:
            rules = await self.backend.sync(ports, None if full else changed, large)
        except Exception as e:
            self.need_full = True
            log.error("Syncing the proxy rules failed; retrying", mode=self.backend.mode, err=str(e))
            return False
        elapsed = time.monotonic() - started
        metrics.observe_sync(elapsed, full)
        metrics.LAST_SYNC.labels(metrics.IP_FAMILY).set(time.time())
        metrics.NO_LOCAL_ENDPOINTS.labels("internal", metrics.IP_FAMILY).set(
            sum(1 for r in rules.values() if r.no_local_internal))
        metrics.NO_LOCAL_ENDPOINTS.labels("external", metrics.IP_FAMILY).set(
            sum(1 for r in rules.values() if r.no_local_external))
        self.health.updated()
        if conntrack.udp_changed(self._synced, ports):
            await conntrack.clean_stale_udp(list(ports.values()))
        self._synced = ports
        self.need_full = False
        if full:
            self._last_full = started
        (log.info if full else log.debug)("Synced the proxy rules", full=full, servicePorts=len(ports),
                                          changed=len(changed), seconds=round(elapsed, 3))
        return True
