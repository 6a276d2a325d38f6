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
from pykubelet.assembly.pod_path import PodPathSettings, build_pod_path, build_wake_path
from pykubelet.pods.admission import Allocatable
from pykubelet.runtime.specs import NodeFacts
from pykubelet.util.tasks import Tasks
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
    """One agent's core, built by the agent's own build_pod_path. A second Core on the same
    FakeRuntime is the agent restarted."""

    def __init__(self, runtime: FakeRuntime, tmp: pathlib.Path, kube: Any = None, mirrors: Any = None):
        self.runtime = runtime
        node = NodeFacts(node_name=NODE, host_ip=HOST_IP, root_dir=str(tmp / "root"),
                         pod_logs_dir=str(tmp / "logs"), cgroup_root=str(tmp / "cgroup"))
        wake = build_wake_path(runtime, node, kube, clock)
        self.path = build_pod_path(
            wake, runtime, PodPathSettings(node, Allocatable(pods=110, cpu_millis=4000, memory_bytes=8 << 30), 60.0),
            clock=clock, kube=kube, mirrors=mirrors)
        self.wakeups, self.cache, self.pleg = wake.wakeups, wake.cache, wake.pleg
        self.statuses, self.deps, self.dispatcher = self.path.statuses, self.path.deps, self.path.dispatcher
        self.tasks = Tasks()

    def start(self) -> "Core":
        self.path.start(self.tasks)
        return self

    async def stop(self) -> None:
        """The agent stops (its stop phase): its loops, workers and probes end, the pods keep running."""
        await self.tasks.stop()
        await self.path.stop()

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
