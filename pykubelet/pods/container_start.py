"""Starting one container, as the kubelet's startContainer: the restart back-off, the image,
the container's config (container_config.py), CreateContainer, StartContainer, postStart.
Each step ends in a StepResult the reporter tells (pods/step_reporter.py).

Only a pod's worker calls these, so nothing here races with itself for the same pod.
"""

from __future__ import annotations

import asyncio
import os
from typing import Awaitable, Callable

from pykubelet.api.pod import Container, Pod
from pykubelet.cri import errors
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.kube.events import NORMAL, WARNING
from pykubelet.pods.container_config import ContainerConfigs
from pykubelet.pods.step_reporter import StepReporter
from pykubelet.pods.step_result import (Action, BackOffFacts, Event, ImageFacts, LogLine, StartFacts, StepResult,
                                        SyncResult, container_failure, pod_desc)
from pykubelet.probes.hooks import run_hook
from pykubelet.runtime import specs
from pykubelet.runtime.env import ContainerConfigError
from pykubelet.runtime.images import IMAGE_PULL_BACKOFF, ImageError, ImageManager
from pykubelet.runtime.service import Runtime
from pykubelet.runtime.state import EXITED, ContainerState
from pykubelet.util.backoff import Backoff
from pykubelet.volumes import api as api_volumes
from pykubelet.volumes.claim_volumes import ClaimMount
from pykubelet.util.durations import format_duration
from pykubelet.util.log import get_logger

log = get_logger(__name__)

CRASH_LOOP_BACK_OFF = "CrashLoopBackOff"
CREATE_CONTAINER_ERROR = "CreateContainerError"
CREATE_CONTAINER_CONFIG_ERROR = "CreateContainerConfigError"
RUN_CONTAINER_ERROR = "RunContainerError"
POST_START_HOOK_ERROR = "PostStartHookError"


def _failed(container: str, error: str) -> Event:
    """The kubelet's Event for a container that could not be started: "Failed", "Error: <why>"."""
    return Event(WARNING, "Failed", f"Error: {error}", container)


def _error(text: str, container: str, err: str) -> LogLine:
    return LogLine("error", text, (("container", container), ("err", err)))


def _restart_key(pod: Pod, container: Container) -> str:
    # Starts with the UID so a pod's entries can be forgotten together.
    return f"{pod.uid}_{container.name}_{specs.container_hash_without_resources(container)}"


def _count_from_logs(log_directory: str, name: str) -> int:
    """The next restart count when the runtime holds no instance of the container: one past the
    newest <restartCount>.log the pod's earlier instances left (the kubelet's way, for a runtime
    that lost its containers), else 0."""
    try:
        counts = [int(f[:-4]) for f in os.listdir(os.path.join(log_directory, name))
                  if f.endswith(".log") and f[:-4].isdigit()]
    except OSError:
        return 0
    return max(counts) + 1 if counts else 0


StopContainer = Callable[..., Awaitable[None]]


class ContainerStarter:
    def __init__(self, cri: Runtime, images: ImageManager, restart_backoff: Backoff, reporter: StepReporter,
                 node: specs.NodeFacts, api: api_volumes.ApiClients | None, stop_container: StopContainer,
                 claim_mounts: Callable[[str], dict[str, ClaimMount]]):
        self.cri = cri
        self.images = images
        self.restart_backoff = restart_backoff
        self.reporter = reporter
        self.configs = ContainerConfigs(cri, node, api, claim_mounts)
        self.stop_container = stop_container  # a failed postStart hook kills the container

    async def start(self, pod: Pod, container: Container, latest: ContainerState | None, sandbox_id: str,
                    sandbox_config: api.PodSandboxConfig, pod_ip: str, result: SyncResult,
                    target: ContainerState | None = None) -> bool:
        """Start (again) one container in the pod's sandbox; True if the runtime was touched.

        `pod_ip` is the pod's IP by the one rule (runtime.state.pod_ip): env, /etc/hosts, postStart.
        `target`: the newest instance of the container an ephemeral container's targetContainerName names.
        Each step's outcome is reported (pods/step_reporter.py) into `result`.
        """
        def report(step: StepResult) -> StepResult:
            return self.reporter.report(pod, step, result)
        # 1. A container that exited waits out its restart back-off (CrashLoopBackOff).
        backing_off = self._crash_loop_back_off(pod, container, latest)
        if backing_off is not None:
            report(backing_off)
            return False
        # 2. Its image, per imagePullPolicy (ErrImagePull, ImagePullBackOff, ErrImageNeverPull).
        image, image_ref = await self._image(pod, container, sandbox_config)
        if not report(image).ok:
            return False
        # 3. Its configuration: volumes, pod files, env (CreateContainerConfigError).
        restart_count = latest.restart_count + 1 if latest else await asyncio.to_thread(
            _count_from_logs, sandbox_config.log_directory, container.name)
        config = await self._config(pod, container, image_ref, restart_count, pod_ip, sandbox_config, target)
        if isinstance(config, StepResult):
            report(config)
            return False
        # 4. CreateContainer (CreateContainerError).
        began = asyncio.get_running_loop().time()
        created = await self._create(pod, container, latest, sandbox_id, config, sandbox_config)
        if isinstance(created, StepResult):
            report(created)
            return False
        # 5. StartContainer (RunContainerError; None: the sandbox went away meanwhile, no failure).
        started = await self._run(pod, container, latest, created, sandbox_id, restart_count, began)
        if started is None or not report(started).ok:
            return True
        # 6. postStart: a hook that fails kills the container (PostStartHookError).
        if container.post_start:
            await self._post_start(pod, container, created, pod_ip, result)
        return True

    def _count_restart(self, pod: Pod, container: Container, latest: ContainerState | None) -> None:
        """A new instance of a container that exited: its restart back-off grows."""
        if latest is not None and latest.state == EXITED:
            self.restart_backoff.next(_restart_key(pod, container), latest.finished_at)

    def _crash_loop_back_off(self, pod: Pod, container: Container, latest: ContainerState | None) -> StepResult | None:
        if latest is None or latest.state != EXITED:
            return None
        key, name = _restart_key(pod, container), container.name
        if not self.restart_backoff.in_backoff_since(key, latest.finished_at):
            return None
        delay = self.restart_backoff.delay(key)
        return container_failure(
            Action.START_CONTAINER, name, BackOffFacts(delay, latest.exit_code), CRASH_LOOP_BACK_OFF,
            f"back-off {format_duration(delay)} restarting failed container={name} pod={pod_desc(pod)}",
            retry_in=self.restart_backoff.remaining(key, latest.finished_at),
            events=(Event(WARNING, "BackOff", f"Back-off restarting failed container {name} in pod {pod_desc(pod)}",
                          name),))

    async def _image(self, pod: Pod, container: Container,
                     sandbox_config: api.PodSandboxConfig) -> tuple[StepResult, str]:
        """The pull's outcome, and the image to create the container from ("" when there is none)."""
        name = container.name
        pulled: list[tuple[float, int]] = []  # (seconds, bytes) of a pull that happened now
        try:
            image_ref = await self.images.ensure(container, sandbox_config, pod,
                                                 lambda kind, reason, message: self.reporter.event(pod, name, kind,
                                                                                                   reason, message),
                                                 pulled.append,
                                                 lambda reason, message: self.reporter.event(pod, None, WARNING,
                                                                                             reason, message))
        except ImageError as e:
            pending = self.images.backoff.remaining_since_update(container.image)
            # Look again soon after a failure, so the status moves on to ImagePullBackOff as the
            # kubelet's does; during the back-off, when it ends; a pull that never started, when
            # the kubelet's pod worker would try again.
            look_again_in = None if e.reason == IMAGE_PULL_BACKOFF else min(pending, 1.0) or 1.0
            return container_failure(Action.PULL_IMAGE, name, ImageFacts(container.image), e.reason, e.message,
                                     retry_in=pending if e.retry_in is None else e.retry_in,
                                     look_again_in=look_again_in if e.retry_in is None else None,
                                     events=(_failed(name, e.reason),)), ""
        return StepResult(Action.PULL_IMAGE, name, ImageFacts(container.image, pulled[0] if pulled else None)), image_ref

    async def _config(self, pod: Pod, container: Container, image_ref: str, restart_count: int, pod_ip: str,
                      sandbox_config: api.PodSandboxConfig,
                      target: ContainerState | None) -> api.ContainerConfig | StepResult:
        """The CRI config of the container; a StepResult when it cannot be made."""
        name = container.name
        try:
            return await self.configs.build(pod, container, image_ref, restart_count, pod_ip, sandbox_config,
                                            target)
        except ContainerConfigError as e:
            return container_failure(Action.START_CONTAINER, name, StartFacts(), CREATE_CONTAINER_CONFIG_ERROR,
                                     str(e), retry_in=self.restart_backoff.delay(_restart_key(pod, container)) or 10.0,
                                     events=(_failed(name, str(e)),),
                                     logs=(_error("Container configuration is invalid", name, str(e)),))

    async def _create(self, pod: Pod, container: Container, latest: ContainerState | None, sandbox_id: str,
                      config: api.ContainerConfig, sandbox_config: api.PodSandboxConfig) -> str | StepResult:
        """The new container's ID, or why the runtime would not create it."""
        name = container.name
        try:
            container_id = await self.cri.create_container(sandbox_id, config, sandbox_config)
        except errors.CRIError as e:
            self._count_restart(pod, container, latest)
            return container_failure(Action.START_CONTAINER, name, StartFacts(), CREATE_CONTAINER_ERROR, e.details,
                                     retry_in=self.restart_backoff.delay(_restart_key(pod, container)) or 1.0,
                                     events=(_failed(name, e.details),),
                                     logs=(_error("Failed to create container", name, str(e)),))
        self.reporter.event(pod, name, NORMAL, "Created", f"Created container: {name}")
        return container_id

    async def _run(self, pod: Pod, container: Container, latest: ContainerState | None, container_id: str,
                   sandbox_id: str, restart_count: int, began: float) -> StepResult | None:
        """StartContainer's outcome; None when the sandbox went away meanwhile."""
        name = container.name
        try:
            await self.cri.start_container(container_id)
        except errors.CRIError as e:
            if not await self._sandbox_ready(sandbox_id):
                # The sandbox went away under us (being stopped): not the container's failure.
                # Forget this attempt; the next sync replaces the sandbox and starts it there.
                log.info("Sandbox stopped while starting a container; retrying in a new sandbox",
                         pod=pod.full_name, container=name)
                await self.cri.remove_container(container_id)
                return None
            self._count_restart(pod, container, latest)
            return container_failure(Action.START_CONTAINER, name, StartFacts(container_id, restart_count),
                                     RUN_CONTAINER_ERROR, e.details, events=(_failed(name, e.details),),
                                     logs=(_error("Failed to start container", name, str(e)),))
        self._count_restart(pod, container, latest)
        return StepResult(Action.START_CONTAINER, name, StartFacts(container_id, restart_count),
                          seconds=asyncio.get_running_loop().time() - began,
                          events=(Event(NORMAL, "Started", f"Started container {name}", name),),
                          logs=(LogLine("info", "Started container", (("container", name), ("id", container_id[:13]),
                                                                      ("restartCount", restart_count))),))

    async def _post_start(self, pod: Pod, container: Container, container_id: str, pod_ip: str,
                          result: SyncResult) -> None:
        name = container.name
        # The kubelet gives postStart no deadline; ours is the slow-call timeout.
        message = await run_hook(self.cri, container.post_start, name, container.ports, container_id, pod_ip,
                                 pod_desc(pod), self.cri.slow_timeout)
        if not message:
            return
        self.reporter.report(pod, container_failure(
            Action.START_CONTAINER, name, StartFacts(container_id), POST_START_HOOK_ERROR, message,
            # Not the message itself in the event: it may carry secrets (the kubelet's reasoning).
            events=(Event(WARNING, "FailedPostStartHook", "PostStartHook failed", name),),
            logs=(LogLine("error", "Failed to execute PostStartHook", (("container", name), ("id", container_id[:13]),
                                                                       ("err", message))),)), result)
        await self.stop_container(pod, name, container_id, "FailedPostStartHook",
                                  pod.termination_grace_period_seconds, pod_ip, "FailedPostStartHook")

    async def _sandbox_ready(self, sandbox_id: str) -> bool:
        try:
            return (await self.cri.pod_sandbox_status(sandbox_id)).status.state == api.SANDBOX_READY
        except errors.NotFound:
            return False

