"""Starting one container, as the kubelet's startContainer: the restart back-off, the image,
the container's config (volumes, pod files, env), CreateContainer, StartContainer, postStart.

Only a pod's worker calls these, so nothing here races with itself for the same pod.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from typing import Awaitable, Callable

from pykubelet.api.pod import Container, Pod
from pykubelet.api.references import referenced_names
from pykubelet.cri import errors
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.kube.events import NORMAL, WARNING, EventRecorder, pod_ref
from pykubelet.kube.objects import NotSynced, ObjectNotFound
from pykubelet.pods.history import PodHistory
from pykubelet.probes.hooks import run_hook
from pykubelet.runtime import data_dirs, podfiles, security, specs
from pykubelet.runtime.env import ContainerConfigError, EnvSources
from pykubelet.runtime.images import IMAGE_PULL_BACKOFF, ImageError, ImageManager
from pykubelet.runtime.service import Runtime
from pykubelet.runtime.service_env import service_env, services_for_pod
from pykubelet.runtime.state import EXITED, ContainerState
from pykubelet.util.backoff import Backoff
from pykubelet.volumes import api as api_volumes
from pykubelet.volumes import local as local_volumes
from pykubelet.util.durations import format_duration
from pykubelet.util.log import get_logger

log = get_logger(__name__)

CRASH_LOOP_BACK_OFF = "CrashLoopBackOff"
CREATE_CONTAINER_ERROR = "CreateContainerError"
CREATE_CONTAINER_CONFIG_ERROR = "CreateContainerConfigError"
RUN_CONTAINER_ERROR = "RunContainerError"
POST_START_HOOK_ERROR = "PostStartHookError"


@dataclass
class SyncResult:
    waiting: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Container name -> (reason, message) for containers that could not start this time."""
    retry_in: float | None = None
    """Seconds until the earliest back-off ends: the worker syncs again then."""
    changed: bool = False
    """Whether the runtime was touched (the state must be read again)."""

    def retry_after(self, seconds: float) -> None:
        self.retry_in = seconds if self.retry_in is None else min(self.retry_in, seconds)


def _pod_desc(pod: Pod) -> str:
    """How the kubelet names a pod in messages: name_namespace(uid)."""
    return f"{pod.name}_{pod.namespace}({pod.uid})"


def _restart_key(pod: Pod, container: Container) -> str:
    # Starts with the UID so a pod's entries can be forgotten together.
    return f"{pod.uid}_{container.name}_{specs.container_hash(container)}"


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
    def __init__(self, cri: Runtime, images: ImageManager, restart_backoff: Backoff, recorder: EventRecorder,
                 node: specs.NodeFacts, api: api_volumes.ApiClients | None, stop_container: StopContainer,
                 history: PodHistory):
        self.cri = cri
        self.history = history
        self.images = images
        self.restart_backoff = restart_backoff
        self.recorder = recorder
        self.node = node
        self.api = api  # None: standalone, no ConfigMaps, Secrets, tokens or Services
        self.stop_container = stop_container  # a failed postStart hook kills the container

    def _event(self, pod: Pod, container: str | None, kind: str, reason: str, message: str) -> None:
        self.recorder.record(pod_ref(pod.namespace, pod.name, pod.uid, container), kind, reason, message)

    async def _env_sources(self, pod: Pod, container: Container) -> EnvSources:
        """The ConfigMaps, Secrets and Service variables the container's env reads."""
        sources = EnvSources(has_api=self.api is not None)
        if self.api is None:
            return sources
        names = referenced_names({"spec": {"containers": [container.raw]}})
        try:
            for resource, known in (("configmaps", sources.config_maps), ("secrets", sources.secrets)):
                for name in names[resource]:
                    try:
                        known[name] = await self.api.objects.get(resource, pod.namespace, name)
                    except ObjectNotFound:
                        known[name] = None
            if not pod.is_static:  # the kubelet waits for Services only for API pods
                await self.api.services.wait_synced()
        except NotSynced as e:
            raise ContainerConfigError(str(e)) from None
        links = pod.raw.get("spec", {}).get("enableServiceLinks", True) is not False
        sources.services = service_env(services_for_pod(self.api.services.services(), pod.namespace, links))
        return sources

    async def start(self, pod: Pod, container: Container, latest: ContainerState | None, sandbox_id: str,
                    sandbox_config: api.PodSandboxConfig, pod_ip: str, result: SyncResult) -> bool:
        """Start (again) one container in the pod's sandbox; True if the runtime was touched.

        `pod_ip` is the pod's IP by the one rule (runtime.state.pod_ip): env, /etc/hosts, postStart.
        """
        name = container.name
        if latest is not None and latest.state == EXITED:
            key = _restart_key(pod, container)
            if self.restart_backoff.in_backoff_since(key, latest.finished_at):
                delay = self.restart_backoff.delay(key)
                result.waiting[name] = (CRASH_LOOP_BACK_OFF, f"back-off {format_duration(delay)} restarting failed "
                                                             f"container={name} pod={pod.name}_{pod.namespace}({pod.uid})")
                remaining = self.restart_backoff.remaining(key, latest.finished_at)
                result.retry_after(remaining)
                self.history.restart_backoff(pod, name, delay, remaining, latest.exit_code)
                self._event(pod, name, WARNING, "BackOff", f"Back-off restarting failed container {name} in pod "
                                                           f"{pod.name}_{pod.namespace}({pod.uid})")
                return False

        def count_restart() -> None:
            if latest is not None and latest.state == EXITED:
                self.restart_backoff.next(_restart_key(pod, container), latest.finished_at)

        restart_count = latest.restart_count + 1 if latest else _count_from_logs(sandbox_config.log_directory, name)
        pulled: list[tuple[float, int]] = []
        try:
            image_ref = await self.images.ensure(container, sandbox_config, pod.full_name,
                                                 lambda kind, reason, message: self._event(pod, name, kind, reason,
                                                                                           message), pulled.append)
        except ImageError as e:
            self._event(pod, name, WARNING, "Failed", f"Error: {e.reason}")
            result.waiting[name] = (e.reason, e.message)
            # Look again soon after a failure, so the status moves on to ImagePullBackOff as the
            # kubelet's does; during the back-off, when it ends.
            pending = self.images.backoff.remaining_since_update(container.image)
            result.retry_after(pending if e.reason == IMAGE_PULL_BACKOFF else min(pending, 1.0) or 1.0)
            self.history.image_failed(pod, name, container.image, e.reason, e.message, pending)
            return False
        self.history.image_ready(pod, name, container.image, pulled[0] if pulled else None)
        os.makedirs(os.path.join(sandbox_config.log_directory, name), mode=0o755, exist_ok=True)
        try:
            env_sources = await self._env_sources(pod, container)
            volumes = await asyncio.to_thread(self._local_volumes, pod)
            projected = api_volumes.volume_paths(self.node.root_dir, pod)
            env = (dict(specs.container_env_of(pod, container, self.node, pod_ip, env_sources))
                   if any(m.sub_path_expr for m in container.volume_mounts) else {})
            mounts = await asyncio.to_thread(local_volumes.container_mounts, self.node.root_dir, pod, container,
                                             {**volumes, **projected}, set(projected), env)
            mounts += await asyncio.to_thread(self._pod_file_mounts, pod, container, pod_ip)
            config = specs.container_config(pod, container, image_ref, restart_count, self.node, pod_ip, mounts,
                                            env_sources)
            if security.effective(pod, container).get("runAsNonRoot"):
                image = await self.cri.image_status(image_ref)
                username = image.username if image is not None else ""
                # An image that names no user runs as root; a user name alone cannot be checked.
                uid = image.uid.value if image is not None and image.HasField("uid") else (None if username else 0)
                security.check_run_as_non_root(pod, container, uid, username)
        except ContainerConfigError as e:
            log.error("Container configuration is invalid", pod=pod.full_name, container=name, err=str(e))
            self._event(pod, name, WARNING, "Failed", f"Error: {e}")
            result.waiting[name] = (CREATE_CONTAINER_CONFIG_ERROR, str(e))
            retry = self.restart_backoff.delay(_restart_key(pod, container)) or 10.0
            result.retry_after(retry)
            self.history.container_failed(pod, name, CREATE_CONTAINER_CONFIG_ERROR, str(e), retry)
            return False
        began = asyncio.get_running_loop().time()
        try:
            container_id = await self.cri.create_container(sandbox_id, config, sandbox_config)
        except errors.CRIError as e:
            log.error("Failed to create container", pod=pod.full_name, container=name, err=str(e))
            self._event(pod, name, WARNING, "Failed", f"Error: {e.details}")
            result.waiting[name] = (CREATE_CONTAINER_ERROR, e.details)
            count_restart()
            retry = self.restart_backoff.delay(_restart_key(pod, container)) or 1.0
            result.retry_after(retry)
            self.history.container_failed(pod, name, CREATE_CONTAINER_ERROR, e.details, retry)
            return False
        self._event(pod, name, NORMAL, "Created", f"Created container: {name}")
        try:
            await self.cri.start_container(container_id)
        except errors.CRIError as e:
            if not await self._sandbox_ready(sandbox_id):
                # The sandbox went away under us (being stopped): not the container's failure.
                # Forget this attempt; the next sync replaces the sandbox and starts it there.
                log.info("Sandbox stopped while starting a container; retrying in a new sandbox",
                         pod=pod.full_name, container=name)
                await self.cri.remove_container(container_id)
                return True
            log.error("Failed to start container", pod=pod.full_name, container=name, err=str(e))
            self._event(pod, name, WARNING, "Failed", f"Error: {e.details}")
            result.waiting[name] = (RUN_CONTAINER_ERROR, e.details)
            count_restart()
            self.history.container_failed(pod, name, RUN_CONTAINER_ERROR, e.details, None)
            return True
        count_restart()
        self.history.container_started(pod, name, container_id, restart_count,
                                       asyncio.get_running_loop().time() - began)
        self._event(pod, name, NORMAL, "Started", f"Started container {name}")
        log.info("Started container", pod=pod.full_name, container=name, id=container_id[:13],
                 restartCount=restart_count)
        if container.post_start:
            # The kubelet gives postStart no deadline; ours is the slow-call timeout.
            message = await run_hook(self.cri, container.post_start, name, container.ports, container_id, pod_ip,
                                     _pod_desc(pod), self.cri.slow_timeout)
            if message:
                log.error("Failed to execute PostStartHook", pod=pod.full_name, container=name,
                          id=container_id[:13], err=message)
                # Not the message itself in the event: it may carry secrets (the kubelet's reasoning).
                self._event(pod, name, WARNING, "FailedPostStartHook", "PostStartHook failed")
                await self.stop_container(pod, name, container_id, "FailedPostStartHook",
                                          pod.termination_grace_period_seconds, pod_ip, "FailedPostStartHook")
                result.waiting[name] = (POST_START_HOOK_ERROR, message)
                self.history.container_failed(pod, name, POST_START_HOOK_ERROR, message, None)
        return True

    def _local_volumes(self, pod: Pod) -> dict[str, str]:
        """The pod's directories (0750, before anything below them), then its emptyDir and hostPath volumes."""
        data_dirs.ensure_pod_dirs(self.node.root_dir, pod.uid)
        return local_volumes.setup_volumes(self.node.root_dir, pod)

    def _pod_file_mounts(self, pod: Pod, container: Container, pod_ip: str) -> list[api.Mount]:
        """The managed /etc/hosts and this instance's termination-message file."""
        try:
            hosts = podfiles.hosts_mount(self.node.root_dir, pod, container, pod_ip, self.node.dns.domain)
            message = podfiles.termination_message_mount(self.node.root_dir, pod, container)
        except OSError as e:
            raise ContainerConfigError(f"cannot write the pod's files under {self.node.root_dir}: {e}") from e
        return [m for m in (hosts, message) if m is not None]

    async def _sandbox_ready(self, sandbox_id: str) -> bool:
        try:
            return (await self.cri.pod_sandbox_status(sandbox_id)).status.state == api.SANDBOX_READY
        except errors.NotFound:
            return False

