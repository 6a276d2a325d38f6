"""The pod lifecycle event generator: notices runtime changes and wakes the pod's worker.

A relist every second compares every sandbox's and container's state with the last one (the
kubelet's generic PLEG). It is the safety net; it is also what tells housekeeping which pods
the runtime holds.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable

from pykubelet.cri import errors
from pykubelet.cri.client import CRIClient
from pykubelet.runtime import labels
from pykubelet.util.log import get_logger

log = get_logger(__name__)

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
        self.relisted.set()

    async def run(self) -> None:
        while True:
            try:
                await self.relist()
            except errors.CRIError as e:
                log.warning("PLEG relist failed", err=str(e))
            await asyncio.sleep(self.period)
