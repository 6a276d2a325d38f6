"""The pod lifecycle event generator: lists the runtime, fills the runtime cache, wakes workers.

A relist lists every sandbox and container (two CRI calls for the whole node) and compares
each pod's (id, state) pairs with the last listing (the kubelet's generic PLEG). A pod whose
listing changed is inspected (the status of its sandboxes and containers) and its worker woken;
the others keep their cached state. It relists every second as a safety net, at once when
the runtime pushes a container exit (CRI GetContainerEvents on containerd 2.x, containerd's task
exit and OOM events on 1.6), and at once when a worker waits for a fresher state than the cache
has (pleg/cache.py).
"""

from __future__ import annotations

import asyncio
from typing import Callable

from pykubelet.cri import errors
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.pleg.cache import RuntimeCache
from pykubelet.runtime import labels
from pykubelet.runtime.service import Runtime
from pykubelet.runtime.inspect import inspect_pod
from pykubelet.runtime.state import PodRuntimeState
from pykubelet.util import metrics
from pykubelet.util.log import get_logger
from pykubelet.util.timeouts import within

log = get_logger(__name__)

FOLLOW_UP_SECONDS = 0.05  # relists after a pushed event, until one shows the change
FOLLOW_UPS = 4
RELIST_SECONDS = 1.0  # the kubelet's relist period
HEALTHY_WITHIN_SECONDS = 180.0  # the kubelet's PLEG health threshold

Listing = frozenset[tuple[str, int]]  # one pod's {(object id, state)}


class RelistPLEG:
    def __init__(self, runtime: Runtime, cache: RuntimeCache, wake: Callable[[str], None],
                 clock: Callable[[], float], root_dir: str, period: float = RELIST_SECONDS):
        self.runtime = runtime
        self.root_dir = root_dir  # where the pods' termination-message files are
        self.cache = cache
        self.wake = wake  # the pod workers' one wake-up path (pods/wakeups.py)
        self.clock = clock
        self.period = period
        self.last_relist = 0.0  # wall clock, for the PLEG health rule
        self.relisted = asyncio.Event()
        self._listings: dict[str, Listing] = {}
        self._pushed = False  # the last kick was a containerd event: follow it up

    def healthy(self, max_age: float = HEALTHY_WITHIN_SECONDS) -> bool:
        """The kubelet's PLEG health rule: a relist finished within the last 3 minutes."""
        return self.last_relist > 0 and self.clock() - self.last_relist < max_age

    async def relist(self) -> None:
        began, wall_began = self.cache.generation, self.clock()
        forced = self.cache.take_reinspect()
        try:
            sandboxes, containers = await asyncio.gather(self.runtime.list_pod_sandbox(),
                                                         self.runtime.list_containers())
        except errors.CRIError as e:
            self.cache.fail(e, began)
            raise
        by_uid: dict[str, tuple[list[api.PodSandbox], list[api.Container]]] = {}
        for sandbox in sandboxes:
            if uid := sandbox.labels.get(labels.POD_UID):
                by_uid.setdefault(uid, ([], []))[0].append(sandbox)
        for container in containers:
            if uid := container.labels.get(labels.POD_UID):
                by_uid.setdefault(uid, ([], []))[1].append(container)
        listings = {uid: frozenset((o.id, o.state) for group in objects for o in group)
                    for uid, objects in by_uid.items()}
        relisted = {uid for uid in listings.keys() | self._listings.keys()
                    if listings.get(uid) != self._listings.get(uid)}
        states: dict[str, PodRuntimeState] = {uid: self.cache.get(uid) for uid in listings}
        before = dict(states)
        inspected = await asyncio.gather(*(inspect_pod(self.runtime, uid, *by_uid[uid], self.root_dir)
                                           for uid in relisted | forced if uid in by_uid),
                                         return_exceptions=True)
        for state in inspected:
            if isinstance(state, BaseException):
                self.cache.fail(state if isinstance(state, errors.CRIError)
                                else errors.CRIError("inspect", None, str(state)), began)
                raise state
            states[state.uid] = state
        self._listings = listings
        self.cache.update(states, began)
        self.last_relist = self.clock()
        metrics.observe_relist(self.last_relist - wall_began, self.last_relist)
        # A pod inspected only because a worker asked (its resources updated in place) wakes its
        # worker only if the inspection shows a change, as the kubelet's ContainerChanged event:
        # a resize the runtime refused changes nothing, and waking on it would sync, try the
        # resize again and ask again, a loop as fast as the runtime answers.
        for uid in relisted | {uid for uid in forced if states.get(uid) != before.get(uid)}:
            self.wake(uid)
        self.relisted.set()

    async def run(self) -> None:
        events = asyncio.create_task(self._follow_task_events(), name="pleg-task-events")
        follow_ups = 0
        kick = self.cache.wanted
        try:
            while True:
                kick.clear()
                try:
                    await self.relist()
                except errors.CRIError as e:
                    log.warning("PLEG relist failed", err=str(e))
                try:
                    await within(kick.wait(), FOLLOW_UP_SECONDS if follow_ups else self.period)
                    if self._pushed:
                        # The CRI plugin records an exit a little after containerd announces it:
                        # look again shortly after every event, not only at the next period.
                        self._pushed, follow_ups = False, FOLLOW_UPS
                except asyncio.TimeoutError:
                    follow_ups = max(follow_ups - 1, 0)
        finally:
            events.cancel()

    async def _follow_task_events(self) -> None:
        """Kick a relist on every pushed container exit; reconnect with back-off if it breaks."""
        delay = 1.0
        while True:
            try:
                async for topic in self.runtime.task_events():
                    log.debug("Runtime event; relisting", event=topic)
                    self._pushed = True
                    self.cache.wanted.set()
                    delay = 1.0
            except errors.Unimplemented:
                log.info("Runtime has no event stream; relisting every period only")
                return
            except errors.CRIError as e:
                log.debug("Runtime event stream broke; reconnecting", err=str(e), retryIn=delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)
