"""Carries out a pod's actions on the runtime: the kubelet's SyncPod, KillPod and cleanup.

Only a pod's worker calls these, so nothing here races with itself for the same pod.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from dataclasses import dataclass, field

from pykubelet.api.pod import Container, Pod
from pykubelet.api.references import referenced_names
from pykubelet.cri import errors
from pykubelet.cri.client import CRIClient
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.kube.events import NORMAL, WARNING, EventRecorder, pod_ref
from pykubelet.kube.objects import NotSynced, ObjectNotFound
from pykubelet.pods.actions import compute_pod_actions, is_terminal
from pykubelet.probes.hooks import run_hook
from pykubelet.runtime import cgroups, gc, podfiles, resources, security, specs
from pykubelet.runtime.env import ContainerConfigError, EnvSources
from pykubelet.runtime.images import IMAGE_PULL_BACKOFF, ImageError, ImageManager
from pykubelet.runtime.service_env import service_env, services_for_pod
from pykubelet.runtime.state import EXITED, ContainerState, PodRuntimeState
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
CONTAINER_CREATING = "ContainerCreating"
POST_START_HOOK_ERROR = "PostStartHookError"
MIN_GRACE_AFTER_PRE_STOP = 2  # the kubelet's minimal shutdown window, so a slow preStop does not mean SIGKILL at once


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


def _recorded_hook(annotation: str) -> dict | None:
    try:
        hook = json.loads(annotation) if annotation else None
    except ValueError:
        return None  # not ours: someone else wrote the annotation
    return hook if isinstance(hook, dict) else None


def _restart_key(pod: Pod, container: Container) -> str:
    # Starts with the UID so a pod's entries can be forgotten together.
    return f"{pod.uid}_{container.name}_{specs.container_hash(container)}"


class PodSyncer:
    def __init__(self, cri: CRIClient, images: ImageManager, restart_backoff: Backoff, logs_root: str,
                 recorder: EventRecorder, node: specs.NodeFacts | None = None,
                 api: api_volumes.ApiClients | None = None):
        self.cri = cri
        self.node = node or specs.NodeFacts()
        self.api = api  # None: standalone, no ConfigMaps, Secrets, tokens or Services
        self.api_volumes = api_volumes.ApiVolumes(self.node.root_dir, self.node.allocatable, api)
        self.mount_backoff = Backoff(initial=1.0, maximum=30.0, clock=restart_backoff.clock)
        self.recorder = recorder
        self.images = images
        self.restart_backoff = restart_backoff
        self.sandbox_backoff = Backoff(initial=1.0, maximum=60.0, clock=restart_backoff.clock)
        self.logs_root = logs_root

    def _event(self, pod: Pod, container: str | None, kind: str, reason: str, message: str) -> None:
        self.recorder.record(pod_ref(pod.namespace, pod.name, pod.uid, container), kind, reason, message)

    async def sync(self, pod: Pod, state: PodRuntimeState, unhealthy: dict[str, str] | None = None) -> SyncResult:
        """`unhealthy`: container ID -> why its liveness or startup probe gave up (it is restarted)."""
        result = SyncResult()
        actions = compute_pod_actions(pod, state, unhealthy)
        if actions.create_sandbox and state.sandboxes:
            self._event(pod, None, NORMAL, "SandboxChanged", "Pod sandbox changed, it will be killed and re-created.")
        if actions.kill_pod:
            await self.kill_pod(pod, state, pod.termination_grace_period_seconds)
            result.changed = True
        elif is_terminal(pod, state) and any(s.ready for s in state.sandboxes):
            log.info("Pod has finished; stopping its sandbox", pod=pod.full_name)
            await self._stop_sandboxes(state)
            result.changed = True
        if actions.kill:
            names = {c.id: c.name for c in state.containers}
            pod_ip = self._pod_ip(pod, state)
            await asyncio.gather(*(self._stop_container(pod, names.get(cid, ""), cid, why,
                                                        pod.termination_grace_period_seconds, pod_ip)
                                   for cid, why in actions.kill.items()))
            result.changed = True
        finished = is_terminal(pod, state)
        if not actions.kill_pod and not finished and not await self._mount_volumes(pod, actions.start, result):
            return result
        if finished:
            await self.api_volumes.teardown(pod)
        if not actions.start:
            return result

        attempt = actions.attempt
        sandbox_config = specs.sandbox_config(pod, attempt, self.logs_root, self.node.dns)
        sandbox_id = actions.sandbox_id
        pod_ip = state.sandboxes[0].ip if state.sandboxes and not actions.create_sandbox else ""
        if actions.create_sandbox:
            sandbox_key = f"{pod.uid}_sandbox"
            if self.sandbox_backoff.in_backoff_since_update(sandbox_key):
                result.retry_after(self.sandbox_backoff.delay(sandbox_key))
                return result
            try:
                sandbox_id = await self._create_sandbox(pod, sandbox_config)
                pod_ip = (await self.cri.pod_sandbox_status(sandbox_id)).status.network.ip
            except errors.CRIError as e:
                self.sandbox_backoff.next(sandbox_key, self.sandbox_backoff.clock())
                log.error("Failed to create pod sandbox", pod=pod.full_name, err=str(e))
                self._event(pod, None, WARNING, "FailedCreatePodSandBox", f"Failed to create pod sandbox: {e.details}")
                for name in actions.start:
                    result.waiting[name] = (CONTAINER_CREATING, f"Failed to create pod sandbox: {e.details}")
                result.retry_after(self.sandbox_backoff.delay(sandbox_key))
                return result
            result.changed = True

        by_name = {c.name: c for c in (*pod.init_containers, *pod.containers)}
        for name in actions.start:
            started = await self._start_container(pod, by_name[name], state.latest(name), sandbox_id,
                                                  sandbox_config, pod_ip, result)
            result.changed |= started
        return result

    async def _mount_volumes(self, pod: Pod, starting: list[str], result: SyncResult) -> bool:
        """(Re)write the pod's configMap, secret, downwardAPI and projected volumes.

        Like the kubelet's volume manager, containers start only once every volume was set up;
        a later failure (an object deleted, say) keeps the last content and is only reported.
        """
        failed = await self.api_volumes.setup(pod)
        paths = api_volumes.volume_paths(self.node.root_dir, pod)
        for name, message in failed.items():
            log.warning("MountVolume.SetUp failed", pod=pod.full_name, volume=name, err=message)
            self._event(pod, None, WARNING, "FailedMount", f'MountVolume.SetUp failed for volume "{name}" : {message}')
        if not [name for name in failed if not api_volumes.is_set_up(paths[name])]:
            self.mount_backoff.forget(pod.uid)
            return True
        if starting:
            for name in starting:
                result.waiting[name] = (CONTAINER_CREATING, "")
            key = f"{pod.uid}_mount"
            self.mount_backoff.next(key, self.mount_backoff.clock())
            result.retry_after(self.mount_backoff.delay(key))  # a watched object's change comes sooner
        return False

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

    async def _create_sandbox(self, pod: Pod, config: api.PodSandboxConfig) -> str:
        os.makedirs(config.log_directory, mode=0o755, exist_ok=True)
        try:
            await asyncio.to_thread(cgroups.ensure_pod_cgroup, config.linux.cgroup_parent,
                                    resources.pod_cgroup_resources(pod))
        except OSError as e:  # the containers still get their own limits
            log.warning("Could not set up the pod cgroup", pod=pod.full_name, cgroup=config.linux.cgroup_parent,
                        err=str(e))
        sandbox_id = await self.cri.run_pod_sandbox(config)
        log.info("Created pod sandbox", pod=pod.full_name, sandbox=sandbox_id[:13],
                 attempt=config.metadata.attempt)
        return sandbox_id

    async def _start_container(self, pod: Pod, container: Container, latest: ContainerState | None,
                               sandbox_id: str, sandbox_config: api.PodSandboxConfig, pod_ip: str,
                               result: SyncResult) -> bool:
        name = container.name
        if latest is not None and latest.state == EXITED:
            key = _restart_key(pod, container)
            if self.restart_backoff.in_backoff_since(key, latest.finished_at):
                delay = self.restart_backoff.delay(key)
                result.waiting[name] = (CRASH_LOOP_BACK_OFF, f"back-off {format_duration(delay)} restarting failed "
                                                             f"container={name} pod={pod.name}_{pod.namespace}({pod.uid})")
                result.retry_after(self.restart_backoff.remaining(key, latest.finished_at))
                self._event(pod, name, WARNING, "BackOff", f"Back-off restarting failed container {name} in pod "
                                                           f"{pod.name}_{pod.namespace}({pod.uid})")
                return False

        def count_restart() -> None:
            if latest is not None and latest.state == EXITED:
                self.restart_backoff.next(_restart_key(pod, container), latest.finished_at)

        restart_count = latest.restart_count + 1 if latest else 0
        try:
            image_ref = await self.images.ensure(container, sandbox_config, pod.full_name,
                                                 lambda kind, reason, message: self._event(pod, name, kind, reason,
                                                                                           message))
        except ImageError as e:
            self._event(pod, name, WARNING, "Failed", f"Error: {e.reason}")
            result.waiting[name] = (e.reason, e.message)
            # Look again soon after a failure, so the status moves on to ImagePullBackOff as the
            # kubelet's does; during the back-off, when it ends.
            pending = self.images.backoff.remaining_since_update(container.image)
            result.retry_after(pending if e.reason == IMAGE_PULL_BACKOFF else min(pending, 1.0) or 1.0)
            return False
        os.makedirs(os.path.join(sandbox_config.log_directory, name), mode=0o755, exist_ok=True)
        try:
            volumes = await asyncio.to_thread(local_volumes.setup_volumes, self.node.root_dir, pod)
            projected = api_volumes.volume_paths(self.node.root_dir, pod)
            mounts = local_volumes.container_mounts(pod, container, {**volumes, **projected}, set(projected))
            mounts += await asyncio.to_thread(self._pod_file_mounts, pod, container, pod_ip)
            env_sources = await self._env_sources(pod, container)
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
            result.retry_after(self.restart_backoff.delay(_restart_key(pod, container)) or 10.0)
            return False
        try:
            container_id = await self.cri.create_container(sandbox_id, config, sandbox_config)
        except errors.CRIError as e:
            log.error("Failed to create container", pod=pod.full_name, container=name, err=str(e))
            self._event(pod, name, WARNING, "Failed", f"Error: {e.details}")
            result.waiting[name] = (CREATE_CONTAINER_ERROR, e.details)
            count_restart()
            result.retry_after(self.restart_backoff.delay(_restart_key(pod, container)) or 1.0)
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
            return True
        count_restart()
        self._event(pod, name, NORMAL, "Started", f"Started container {name}")
        log.info("Started container", pod=pod.full_name, container=name, id=container_id[:13],
                 restartCount=restart_count)
        post_start = (container.raw.get("lifecycle") or {}).get("postStart")
        if post_start:
            hook_ip = self.node.host_ip if pod.host_network else pod_ip
            # The kubelet gives postStart no deadline; ours is the slow-call timeout.
            message = await run_hook(self.cri, post_start, container.raw, container_id, hook_ip, _pod_desc(pod),
                                     self.cri.slow_timeout)
            if message:
                log.error("Failed to execute PostStartHook", pod=pod.full_name, container=name,
                          id=container_id[:13], err=message)
                # Not the message itself in the event: it may carry secrets (the kubelet's reasoning).
                self._event(pod, name, WARNING, "FailedPostStartHook", "PostStartHook failed")
                await self._stop_container(pod, name, container_id, "FailedPostStartHook",
                                           pod.termination_grace_period_seconds, hook_ip, "FailedPostStartHook")
                result.waiting[name] = (POST_START_HOOK_ERROR, message)
        return True

    def _pod_ip(self, pod: Pod | None, state: PodRuntimeState) -> str:
        """The address hooks reach the pod at: the node's for host-network pods."""
        if pod is not None and pod.host_network:
            return self.node.host_ip
        return next((s.ip for s in state.sandboxes if s.ready), "")

    def _pod_file_mounts(self, pod: Pod, container: Container, pod_ip: str) -> list[api.Mount]:
        """The managed /etc/hosts and this instance's termination-message file."""
        try:
            hosts = podfiles.hosts_mount(self.node.root_dir, pod, container,
                                         self.node.host_ip if pod.host_network else pod_ip, self.node.dns.domain)
            message = podfiles.termination_message_mount(self.node.root_dir, pod, container)
        except OSError as e:
            raise ContainerConfigError(f"cannot write the pod's files under {self.node.root_dir}: {e}") from e
        return [m for m in (hosts, message) if m is not None]

    async def _sandbox_ready(self, sandbox_id: str) -> bool:
        try:
            return (await self.cri.pod_sandbox_status(sandbox_id)).status.state == api.SANDBOX_READY
        except errors.NotFound:
            return False

    async def _stop_container(self, pod: Pod | None, name: str, container_id: str, why: str, grace: int,
                              pod_ip: str = "", message: str = "", recorded: ContainerState | None = None,
                              state: PodRuntimeState | None = None) -> None:
        """The kubelet's killContainer: the preStop hook first, inside the grace period; the
        stop gets what is left (at least MIN_GRACE_AFTER_PRE_STOP seconds).

        Without the pod's spec (an orphan), the hook the container recorded in its annotations runs.
        """
        log.info("Killing container", pod=pod.full_name if pod else "", container=name, id=container_id[:13],
                 reason=why, gracePeriod=grace)
        if pod is not None:
            self._event(pod, name, NORMAL, "Killing", message or f"Stopping container {name}")
            spec = next((c.raw for c in (*pod.init_containers, *pod.containers) if c.name == name), None)
            pre_stop, pod_desc = (spec.get("lifecycle") or {}).get("preStop") if spec else None, _pod_desc(pod)
        else:
            spec = {"name": name}
            pre_stop = _recorded_hook(recorded.pre_stop) if recorded is not None else None
            pod_desc = f"{state.name}_{state.namespace}({state.uid})" if state is not None else ""
        if pre_stop and grace > 0:
            loop = asyncio.get_running_loop()
            began = loop.time()
            try:
                failure = await asyncio.wait_for(
                    run_hook(self.cri, pre_stop, spec, container_id, pod_ip, pod_desc, grace), grace)
            except asyncio.TimeoutError:
                failure = ""
                log.info("PreStop hook not completed in grace period", pod=pod_desc, container=name,
                         gracePeriod=grace)
            if failure:
                log.error("PreStop hook failed", pod=pod_desc, container=name, err=failure)
                if pod is not None:
                    self._event(pod, name, WARNING, "FailedPreStopHook", failure)
            grace = max(MIN_GRACE_AFTER_PRE_STOP, grace - int(loop.time() - began))
        await self.cri.stop_container(container_id, grace)

    async def _stop_sandboxes(self, state: PodRuntimeState, only_ready: bool = True) -> None:
        await asyncio.gather(*(self.cri.stop_pod_sandbox(s.id) for s in state.sandboxes
                               if s.ready or not only_ready))

    async def kill_pod(self, pod: Pod | None, state: PodRuntimeState, grace: int) -> None:
        """Stop every running container (SIGTERM, SIGKILL after grace), then every sandbox.

        Stopping a sandbox that is already not ready is how its network gets torn down.
        """
        pod_ip = self._pod_ip(pod, state)
        await asyncio.gather(*(self._stop_container(pod, c.name, c.id, "Stopping pod", grace, pod_ip,
                                                    recorded=c, state=state)
                               for c in state.running()))
        await self._stop_sandboxes(state, only_ready=False)

    async def prune(self, state: PodRuntimeState) -> None:
        """Remove dead containers and sandboxes the GC policy does not keep, with their logs."""
        containers, sandboxes = gc.dead_to_remove(state)
        for c in state.containers:
            if c.id in containers:
                await self._remove_container(c)
        for sandbox_id in sandboxes:
            await self.cri.remove_pod_sandbox(sandbox_id)

    async def _remove_container(self, c: ContainerState) -> None:
        await self.cri.remove_container(c.id)
        if c.log_path:
            try:
                os.remove(c.log_path)
            except FileNotFoundError:
                pass

    async def terminate(self, pod_name: str, uid: str, state: PodRuntimeState, grace: int,
                        log_directory: str | None, pod: Pod | None = None) -> None:
        """Stop and remove everything of a pod that is gone, then its log directory."""
        await self.kill_pod(pod, state, grace)
        for c in state.containers:
            await self._remove_container(c)
        for s in state.sandboxes:
            await self.cri.remove_pod_sandbox(s.id)
        if log_directory:
            shutil.rmtree(log_directory, ignore_errors=True)
        self.api_volumes.forget(uid)
        await asyncio.to_thread(local_volumes.teardown_volumes, self.node.root_dir, uid)
        self.mount_backoff.forget(uid)
        await asyncio.to_thread(cgroups.remove_pod_cgroups, uid)
        self.restart_backoff.forget(uid)
        self.sandbox_backoff.forget(uid)
        log.info("Pod terminated and cleaned up", pod=pod_name, uid=uid)
