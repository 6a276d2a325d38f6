"""The stateful core (dispatcher -> worker -> sync -> status, with the PLEG and its cache) wired as
the agent wires it, on the fake runtime, with the node's directories in a temporary folder.

Tests run under looptime: the event loop's clock is virtual, so a 10 s back-off or a 30 s grace
period passes in microseconds. The core's wall clock is EPOCH plus that virtual time, the same
clock the fake runtime stamps its containers with.
"""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any, Awaitable, Callable

from pykubelet.api.pod import Pod, parse_pod
from pykubelet.kube.events import EventRecorder
from pykubelet.pleg.cache import RuntimeCache
from pykubelet.pleg.relist import RelistPLEG
from pykubelet.pods.admission import Allocatable
from pykubelet.pods.dispatcher import PodDispatcher
from pykubelet.pods.history import PodHistory
from pykubelet.pods.sync import PodSyncer
from pykubelet.pods.sync_parts import build_sync_parts
from pykubelet.pods.wakeups import Wakeups
from pykubelet.pods.worker import WorkerDeps
from pykubelet.probes.manager import ProbeManager
from pykubelet.runtime.images import ImageManager
from pykubelet.runtime.specs import NodeFacts
from pykubelet.status.manager import StatusManager
from pykubelet.util.backoff import Backoff
from tests.fakes.runtime import FakeRuntime

EPOCH = 1_700_000_000.0
HOST_IP = "192.168.1.10"
NODE = "node1"


def clock() -> float:
    return EPOCH + asyncio.get_running_loop().time()


def pod(name: str = "web", uid: str = "uid-web", containers: list[dict] | None = None, **spec: Any) -> Pod:
    raw = {"metadata": {"name": name, "namespace": "default", "uid": uid,
                        "annotations": {"kubernetes.io/config.source": "api"}},
           "spec": {"containers": containers or [{"name": "app", "image": "busybox:1.36"}], **spec}}
    return parse_pod(raw, where="test")


class Core:
    """One agent's core. A second Core on the same FakeRuntime is the agent restarted."""

    def __init__(self, runtime: FakeRuntime, tmp: pathlib.Path, kube: Any = None, mirrors: Any = None):
        self.runtime = runtime
        self.wakeups = Wakeups()
        self.cache = RuntimeCache()
        self.pleg = RelistPLEG(runtime, self.cache, self.wakeups.wake, clock, str(tmp / "root"))
        self.statuses = StatusManager(kube, mirrors)
        recorder = EventRecorder(None, NODE)
        node = NodeFacts(node_name=NODE, host_ip=HOST_IP, root_dir=str(tmp / "root"),
                         pod_logs_dir=str(tmp / "logs"), cgroup_root=str(tmp / "cgroup"))
        syncer = PodSyncer(build_sync_parts(runtime, ImageManager(runtime, Backoff(clock=clock)), recorder,
                                            PodHistory(clock), node, clock=clock))
        self.deps = WorkerDeps(cache=self.cache, syncer=syncer, statuses=self.statuses, recorder=recorder,
                               probes=ProbeManager(runtime, recorder, self.wakeups.wake, clock,
                                                   observe=syncer.history.probe),
                               wakeups=self.wakeups, host_ip=HOST_IP, resync_seconds=60.0, mirrors=mirrors,
                               clock=clock)
        self.dispatcher = PodDispatcher(self.deps, NODE, Allocatable(pods=110, cpu_millis=4000,
                                                                     memory_bytes=8 << 30))
        self._tasks: list[asyncio.Task] = []

    def start(self) -> "Core":
        self._tasks.append(asyncio.create_task(self.pleg.run()))
        if self.statuses.kube is not None:
            self._tasks.append(asyncio.create_task(self.statuses.run()))
        return self

    async def stop(self) -> None:
        """The agent stops: its loops and workers end, the pods keep running."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.dispatcher.stop()
        for uid in list(self.deps.probes._pods):
            self.deps.probes.retain(uid, set())

    def status(self, uid: str = "uid-web") -> dict[str, Any]:
        return self.statuses.get(uid) or {}

    def container(self, name: str = "app", uid: str = "uid-web") -> dict[str, Any]:
        status = self.status(uid)
        for cs in (*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])):
            if cs["name"] == name:
                return cs
        return {}

    def condition(self, kind: str, uid: str = "uid-web") -> dict[str, Any]:
        return next((c for c in self.status(uid).get("conditions") or [] if c["type"] == kind), {})


async def until(check: Callable[[], bool | Awaitable[bool]], timeout: float = 120.0, what: str = "") -> float:
    """Wait (in loop time) until check() holds; returns the loop time it held at."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return loop.time()
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what or check}")
        await asyncio.sleep(0.01)
