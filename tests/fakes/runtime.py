"""An in-memory container runtime behind the runtime seam (pykubelet.runtime.service.Runtime).

Sandboxes and containers live in dicts and answer with the real CRI messages; time is the test's
clock (virtual under looptime). A test scripts what containers do and what goes wrong:
- `behave(name, ...)`: how containers of that name run (exit at once with a code, run until
  stopped, ignore SIGTERM until the grace period ends);
- `exit(name, code)`: a running container exits now (and a task event is pushed);
- `kill_sandbox(uid)`: the pod's sandbox dies (NOTREADY), its containers exit;
- `fail(rpc, error, times)`: the next call(s) of an RPC raise;
- `exec_results`: what ExecSync answers (hooks, probes), per command's first word;
- `private[image] = (username, password)`: pulls of that image need those credentials;
- `calls`: every RPC made, in order, for assertions; `pulls`: each PullImage's image and auth.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from dataclasses import dataclass
from typing import AsyncIterator, Callable

from pykubelet.cri import errors
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.runtime import labels

NS = 1_000_000_000


@dataclass
class Behaviour:
    exit_code: int | None = None
    """None: runs until stopped; else exits with this code right after it started."""
    ignores_sigterm: bool = False
    """Only SIGKILL (at the end of the grace period) stops it."""
    term_exit_code: int = 143


class FakeRuntime:
    def __init__(self, clock: Callable[[], float]):
        self.clock = clock
        self.slow_timeout = 120.0
        self.sandboxes: dict[str, api.PodSandboxStatus] = {}
        self.containers: dict[str, api.ContainerStatus] = {}
        self.container_sandbox: dict[str, str] = {}
        self.container_devices: dict[str, list[api.Device]] = {}
        """Container ID -> the devices it was created with (ContainerStatus has no field for them)."""
        self.images = {"busybox:1.36": "sha256:busybox"}
        self.private: dict[str, tuple[str, str]] = {}
        self.pulls: list[tuple[str, api.AuthConfig | None]] = []
        self.behaviours: dict[str, Behaviour] = {}
        self.exec_results: dict[str, tuple[int, bytes]] = {}
        self.execs: list[tuple[str, list[str]]] = []
        self.stops: list[tuple[str, int, float]] = []  # (container name, grace, when)
        self.starts: list[tuple[str, float]] = []  # (container name, when): what GC removed too
        self.calls: list[str] = []
        self.updates: list[tuple[str, api.LinuxContainerResources]] = []  # (container name, what it was set to)
        self.memory_usage: dict[str, int] = {}  # container name -> bytes its stats report
        self._failures: dict[str, list[errors.CRIError]] = {}
        self._ids = itertools.count(1)
        self._ips = itertools.count(2)
        self._events: asyncio.Queue[str] = asyncio.Queue()

    # --- scripting
    def behave(self, name: str, **kwargs) -> None:
        self.behaviours[name] = Behaviour(**kwargs)

    def fail(self, rpc: str, error: type[errors.CRIError] = errors.CRIError, times: int = 1,
             details: str = "injected failure") -> None:
        self._failures.setdefault(rpc, []).extend(error(rpc, None, details) for _ in range(times))

    def running(self, name: str) -> list[api.ContainerStatus]:
        return [c for c in self.containers.values() if c.metadata.name == name and c.state == api.CONTAINER_RUNNING]

    def named(self, name: str) -> list[api.ContainerStatus]:
        """Every instance of a container name, oldest first."""
        return sorted((c for c in self.containers.values() if c.metadata.name == name), key=lambda c: c.created_at)

    def exit(self, name: str, code: int, reason: str = "") -> None:
        for status in self.running(name):
            self._exit(status, code, reason)

    def kill_sandbox(self, uid: str) -> None:
        for sandbox in self.sandboxes.values():
            if sandbox.metadata.uid == uid and sandbox.state == api.SANDBOX_READY:
                self._stop_sandbox(sandbox)

    def started(self, name: str) -> list[float]:
        """When each instance of a container name was started, removed ones included."""
        return [when for n, when in self.starts if n == name]

    def count(self, rpc: str) -> int:
        return self.calls.count(rpc)

    # --- internals
    def _call(self, rpc: str) -> None:
        self.calls.append(rpc)
        pending = self._failures.get(rpc)
        if pending:
            raise pending.pop(0)

    def _now(self) -> int:
        return int(self.clock() * NS)

    def _exit(self, status: api.ContainerStatus, code: int, reason: str = "") -> None:
        if status.state != api.CONTAINER_RUNNING:
            return
        status.state, status.exit_code, status.finished_at = api.CONTAINER_EXITED, code, self._now()
        status.reason = reason or ("Completed" if code == 0 else "Error")
        self._events.put_nowait("/tasks/exit")

    def _stop_sandbox(self, sandbox: api.PodSandboxStatus) -> None:
        for cid, sid in self.container_sandbox.items():
            if sid == sandbox.id:
                self._exit(self.containers[cid], 137)
        sandbox.state = api.SANDBOX_NOTREADY
        sandbox.network.ip = ""

    def _sandbox(self, sandbox_id: str) -> api.PodSandboxStatus:
        if sandbox_id not in self.sandboxes:
            raise errors.NotFound("", None, f"sandbox {sandbox_id} not found")
        return self.sandboxes[sandbox_id]

    def _container(self, container_id: str) -> api.ContainerStatus:
        if container_id not in self.containers:
            raise errors.NotFound("", None, f"container {container_id} not found")
        return self.containers[container_id]

    @staticmethod
    def _matches(labels_: dict[str, str], selector: dict[str, str] | None) -> bool:
        return all(labels_.get(k) == v for k, v in (selector or {}).items())

    # --- the Runtime protocol: listing and inspecting
    async def list_pod_sandbox(self, label_selector: dict[str, str] | None = None) -> list[api.PodSandbox]:
        self._call("ListPodSandbox")
        return [api.PodSandbox(id=s.id, metadata=s.metadata, state=s.state, created_at=s.created_at,
                               labels=s.labels, annotations=s.annotations)
                for s in self.sandboxes.values() if self._matches(s.labels, label_selector)]

    async def list_containers(self, label_selector: dict[str, str] | None = None) -> list[api.Container]:
        self._call("ListContainers")
        return [api.Container(id=c.id, pod_sandbox_id=self.container_sandbox[c.id], metadata=c.metadata,
                              image=c.image, image_ref=c.image_ref, state=c.state, created_at=c.created_at,
                              labels=c.labels, annotations=c.annotations)
                for c in self.containers.values() if self._matches(c.labels, label_selector)]

    async def pod_sandbox_status(self, sandbox_id: str, verbose: bool = False) -> api.PodSandboxStatusResponse:
        self._call("PodSandboxStatus")
        return api.PodSandboxStatusResponse(status=self._sandbox(sandbox_id))

    async def container_status(self, container_id: str, verbose: bool = False) -> api.ContainerStatusResponse:
        self._call("ContainerStatus")
        return api.ContainerStatusResponse(status=self._container(container_id))

    async def task_events(self) -> AsyncIterator[str]:
        while True:
            yield await self._events.get()

    # --- sandboxes
    async def run_pod_sandbox(self, config: api.PodSandboxConfig, runtime_handler: str = "") -> str:
        self._call("RunPodSandbox")
        sandbox_id = f"sb{next(self._ids)}"
        self.sandboxes[sandbox_id] = api.PodSandboxStatus(
            id=sandbox_id, metadata=config.metadata, state=api.SANDBOX_READY, created_at=self._now(),
            network=api.PodSandboxNetworkStatus(ip=f"10.88.0.{next(self._ips)}"),
            labels=config.labels, annotations=config.annotations)
        return sandbox_id

    async def stop_pod_sandbox(self, sandbox_id: str) -> None:
        self._call("StopPodSandbox")
        if sandbox_id in self.sandboxes:
            self._stop_sandbox(self.sandboxes[sandbox_id])

    async def remove_pod_sandbox(self, sandbox_id: str) -> None:
        self._call("RemovePodSandbox")
        sandbox = self.sandboxes.pop(sandbox_id, None)
        if sandbox is not None:
            for cid in [c for c, s in self.container_sandbox.items() if s == sandbox_id]:
                self.containers.pop(cid, None)
                self.container_sandbox.pop(cid, None)

    # --- containers
    async def create_container(self, sandbox_id: str, config: api.ContainerConfig,
                               sandbox_config: api.PodSandboxConfig) -> str:
        self._call("CreateContainer")
        if self._sandbox(sandbox_id).state != api.SANDBOX_READY:
            raise errors.CRIError("CreateContainer", None, "sandbox is not ready")
        container_id = f"c{next(self._ids)}"
        log_path = os.path.join(sandbox_config.log_directory, config.log_path)
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        open(log_path, "a").close()  # containerd creates the log file with the container
        self.containers[container_id] = api.ContainerStatus(
            id=container_id, metadata=config.metadata, state=api.CONTAINER_CREATED, created_at=self._now(),
            image=config.image, image_ref=config.image.image, labels=config.labels, annotations=config.annotations,
            log_path=log_path, mounts=config.mounts,
            resources=api.ContainerResources(linux=config.linux.resources))
        self.container_sandbox[container_id] = sandbox_id
        self.container_devices[container_id] = list(config.devices)
        return container_id

    async def start_container(self, container_id: str) -> None:
        self._call("StartContainer")
        status = self._container(container_id)
        status.state, status.started_at = api.CONTAINER_RUNNING, self._now()
        self.starts.append((status.metadata.name, self.clock()))
        behaviour = self.behaviours.get(status.metadata.name, Behaviour())
        if behaviour.exit_code is not None:
            self._exit(status, behaviour.exit_code)

    async def stop_container(self, container_id: str, grace_seconds: int) -> None:
        self._call("StopContainer")
        status = self.containers.get(container_id)
        if status is None or status.state != api.CONTAINER_RUNNING:
            return
        self.stops.append((status.metadata.name, grace_seconds, self.clock()))
        behaviour = self.behaviours.get(status.metadata.name, Behaviour())
        if behaviour.ignores_sigterm and grace_seconds > 0:
            await asyncio.sleep(grace_seconds)  # SIGKILL when the grace period is over
            self._exit(status, 137)
        else:
            self._exit(status, behaviour.term_exit_code)

    async def remove_container(self, container_id: str) -> None:
        self._call("RemoveContainer")
        self.containers.pop(container_id, None)
        self.container_sandbox.pop(container_id, None)

    async def exec_sync(self, container_id: str, cmd: list[str], timeout_seconds: int) -> api.ExecSyncResponse:
        self._call("ExecSync")
        self.execs.append((self._container(container_id).metadata.name, list(cmd)))
        code, out = self.exec_results.get(cmd[0] if cmd else "", (0, b""))
        return api.ExecSyncResponse(exit_code=code, stdout=out)

    async def update_container_resources(self, container_id: str, linux: api.LinuxContainerResources) -> None:
        self._call("UpdateContainerResources")
        status = self._container(container_id)
        self.updates.append((status.metadata.name, linux))
        status.resources.linux.CopyFrom(linux)

    async def list_container_stats(self, label_selector: dict[str, str] | None = None) -> list[api.ContainerStats]:
        self._call("ListContainerStats")
        return [api.ContainerStats(attributes=api.ContainerAttributes(id=c.id, metadata=c.metadata, labels=c.labels),
                                   memory=api.MemoryUsage(usage_bytes=api.UInt64Value(
                                       value=self.memory_usage.get(c.metadata.name, 0))))
                for c in self.containers.values()
                if c.state == api.CONTAINER_RUNNING and self._matches(c.labels, label_selector)]

    # --- images
    async def image_status(self, image: str) -> api.Image | None:
        self._call("ImageStatus")
        ref = self.images.get(image)
        return api.Image(id=ref, repo_tags=[image]) if ref else None

    async def pull_image(self, image: str, sandbox_config: api.PodSandboxConfig | None = None,
                         auth: api.AuthConfig | None = None) -> str:
        self.pulls.append((image, auth))
        self._call("PullImage")
        if image in self.private and (auth is None or (auth.username, auth.password) != self.private[image]):
            raise errors.CRIError("PullImage", None, f'failed to pull and unpack image "{image}": '
                                                     "401 Unauthorized")
        self.images.setdefault(image, f"sha256:{abs(hash(image)):x}")
        return self.images[image]


def pod_uid_of(status: api.ContainerStatus) -> str:
    return status.labels.get(labels.POD_UID, "")
