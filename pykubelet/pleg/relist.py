"""The pod lifecycle event generator: notices runtime changes and wakes the pod's worker.

A relist compares every sandbox's and container's state with the last one (the kubelet's
generic PLEG): every second as a safety net, and at once when containerd pushes a task event
(start, exit, OOM). The relist is also what tells housekeeping which pods the runtime holds.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable

from pykubelet.cri import errors
from pykubelet.cri.client import CRIClient
from pykubelet.cri.task_events import task_events
from pykubelet.runtime import labels
from pykubelet.util import metrics
from pykubelet.util.log import get_logger

log = get_logger(__name__)

FOLLOW_UP_SECONDS = 0.05  # relists after a pushed event, until one shows the change
FOLLOW_UPS = 4

Snapshot = dict[str, frozenset[tuple[str, int]]]  # pod UID -> {(object id, state)}


class RelistPLEG:
    def __init__(self, cri: CRIClient, on_change: Callable[[str], None], period: float = 1.0):
        self.cri = cri
        self.on_change = on_change
        self.period = period
        self.last_relist = 0.0
        self.snapshot_time = 0.0  # when the listing behind runtime_uids was asked for
        self.relisted = asyncio.Event()
        self._snapshot: Snapshot = {}
        self._kick = asyncio.Event()  # set by a pushed task event: relist now

    @property
    def runtime_uids(self) -> set[str]:
        return set(self._snapshot)

    def healthy(self, max_age: float = 180.0) -> bool:
        """The kubelet's PLEG health rule: a relist finished within the last 3 minutes."""
        return self.last_relist > 0 and time.time() - self.last_relist < max_age

    async def relist(self) -> None:
        started = time.time()
        sandboxes, containers = await asyncio.gather(self.cri.list_pod_sandbox(), self.cri.list_containers())
        snapshot: dict[str, set[tuple[str, int]]] = {}
        for obj in (*sandboxes, *containers):
            uid = obj.labels.get(labels.POD_UID)
            if uid:
                snapshot.setdefault(uid, set()).add((obj.id, obj.state))
        new = {uid: frozenset(items) for uid, items in snapshot.items()}
        for uid in new.keys() | self._snapshot.keys():
            if new.get(uid) != self._snapshot.get(uid):
                self.on_change(uid)
        self._snapshot = new
        self.snapshot_time = started
        self.last_relist = time.time()
        metrics.observe_relist(self.last_relist - started, self.last_relist)
        self.relisted.set()

    async def run(self) -> None:
        events = asyncio.create_task(self._follow_task_events(), name="pleg-task-events")
        follow_ups = 0
        try:
            while True:
                self._kick.clear()
                try:
                    await self.relist()
                except errors.CRIError as e:
                    log.warning("PLEG relist failed", err=str(e))
                try:
                    wait = FOLLOW_UP_SECONDS if follow_ups else self.period
                    await asyncio.wait_for(self._kick.wait(), wait)
                    # The CRI plugin records an exit a little after containerd announces it:
                    # look again shortly after every event, not only at the next period.
                    follow_ups = FOLLOW_UPS
                except asyncio.TimeoutError:
                    follow_ups = max(follow_ups - 1, 0)
        finally:
            events.cancel()

    async def _follow_task_events(self) -> None:
        """Kick a relist on every containerd task event; reconnect with back-off if it breaks."""
        delay = 1.0
        while True:
            try:
                async for topic in task_events(self.cri):
                    log.debug("containerd task event; relisting", topic=topic)
                    self._kick.set()
                    delay = 1.0
            except errors.Unimplemented:
                log.info("Runtime has no containerd event stream; relisting every period only")
                return
            except errors.CRIError as e:
                log.debug("containerd event stream broke; reconnecting", err=str(e), retryIn=delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)
