"""The container log manager: keeps every running container's log file below
containerLogMaxSize and its files at most containerLogMaxFiles, as the kubelet's does.

Every containerLogMonitorInterval the runtime's running containers are listed; for each whose
live log file is at least max_size, a rotation (rotated_logs.py decides, log_files.py does it in
a worker thread):
  1. remove the left-overs of cut-short rotations and the oldest rotated files, so that at most
     max_files - 2 stay;
  2. gzip the ones that stay (`<log>.<time>` -> `<log>.<time>.gz`);
  3. rename the live file to `<log>.<time>` and have the runtime reopen it (CRI
     ReopenContainerLog), so the container writes a new `<log>`; if the runtime cannot, the
     rename is undone and the next round tries again.
A live file that is missing (removed by hand) is reopened. At most max_workers containers are
worked on at once, and one container never by two at a time; a round ends before the next begins.
An agent stopped between the rename and the reopen leaves the live file missing: the next agent's
first round reopens it.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timezone
from typing import Callable, Protocol

from pykubelet.config.settings import ContainerLogSettings
from pykubelet.cri import errors
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.runtime import rotated_logs
from pykubelet.runtime.log_files import LogDirectory, NotBeneathLogsRoot
from pykubelet.util.log import get_logger

log = get_logger(__name__)


class LogRuntime(Protocol):
    """The CRI calls the log manager makes (cri.client.CRIClient has them)."""

    async def list_containers(self, label_selector: dict[str, str] | None = None) -> list[api.Container]: ...

    async def container_status(self, container_id: str, verbose: bool = False) -> api.ContainerStatusResponse: ...

    async def reopen_container_log(self, container_id: str) -> None: ...


class ContainerLogManager:
    def __init__(self, runtime: LogRuntime, settings: ContainerLogSettings, logs_root: str,
                 now: Callable[[], datetime] = lambda: datetime.now(timezone.utc)):
        self.runtime = runtime
        self.max_size = settings.max_size_bytes
        self.max_files = settings.max_files
        self.workers = settings.max_workers
        self.interval = settings.monitor_interval
        self.logs_root = logs_root
        self.now = now

    @property
    def enabled(self) -> bool:
        """A negative containerLogMaxSize turns rotation off, as in the kubelet."""
        return self.max_size >= 0

    async def run(self) -> None:
        """Round after round until cancelled (the agent's stop); a failed round is logged."""
        log.info("Starting container log rotation", maxSize=self.max_size, maxFiles=self.max_files,
                 workers=self.workers, interval=f"{self.interval:g}s")
        while True:
            started = time.monotonic()
            try:
                await self.rotate_round()
            except errors.CRIError as e:
                log.error("Failed to rotate container logs", err=str(e))
            await asyncio.sleep(max(0.0, self.interval - (time.monotonic() - started)))

    async def rotate_round(self) -> None:
        """One round: every running container's log, with at most `workers` at once."""
        running = [c.id for c in await self.runtime.list_containers() if c.state == api.CONTAINER_RUNNING]
        queue = list(dict.fromkeys(running))  # each container once

        async def worker() -> None:
            while queue:
                await self.process_container(queue.pop(0))
        await asyncio.gather(*(worker() for _ in range(min(self.workers, len(queue)))))

    async def process_container(self, container_id: str) -> None:
        """Rotate one container's log if it is too big; a failure is logged, never raised."""
        try:
            status = (await self.runtime.container_status(container_id)).status
            path = status.log_path
            if not path:
                return
            directory = await asyncio.to_thread(LogDirectory, self.logs_root, path)
        except NotBeneathLogsRoot as e:
            log.debug("Not rotating a log outside the pod logs dir", containerID=container_id, err=str(e))
            return
        except (errors.CRIError, OSError) as e:
            log.error("Failed to get the container's log", containerID=container_id, err=str(e))
            return
        try:
            await self._rotate_if_too_big(container_id, directory)
        except (errors.CRIError, OSError) as e:
            log.error("Failed to rotate the container's log", containerID=container_id, path=path, err=str(e))
        finally:
            directory.close()

    async def _rotate_if_too_big(self, container_id: str, directory: LogDirectory) -> None:
        size = await asyncio.to_thread(directory.size)
        if size is None:  # removed by hand, or an earlier rotation cut short: the runtime makes a new one
            await self.runtime.reopen_container_log(container_id)
            size = await asyncio.to_thread(directory.size)
            if size is None:
                raise FileNotFoundError(f"{directory.name} is still missing after reopening it")
        if size < self.max_size:
            return
        names = await asyncio.to_thread(self._prune_and_compress, directory)
        rotated = rotated_logs.rotated_name(directory.name, self.now())
        if rotated_logs.name_taken(rotated, names):
            log.debug("Container log rotated already this second; next round", containerID=container_id)
            return
        await asyncio.to_thread(directory.rename, directory.name, rotated)
        try:
            await self.runtime.reopen_container_log(container_id)
        except errors.CRIError:
            # The container still writes to the renamed file: give it its name back for next round.
            try:
                await asyncio.to_thread(directory.rename, rotated, directory.name)
            except OSError as e:
                log.error("Failed to rename the rotated log back", containerID=container_id, rotated=rotated,
                          err=str(e))
            raise
        log.debug("Rotated a container's log", containerID=container_id, size=size, rotated=rotated)

    def _prune_and_compress(self, directory: LogDirectory) -> list[str]:
        """Steps 1 and 2 (in a worker thread); the directory's names after them."""
        plan = rotated_logs.plan_rotation(directory.rotated(), self.max_files)
        for name in plan.remove:
            directory.remove(name)
        for name in plan.compress:
            directory.compress(name)
        return directory.names()
