"""Carries out a pod's actions on the runtime: the kubelet's SyncPod.

Starting one container is container_start.py's job; stopping and cleaning up is kill.py's.
Only a pod's worker calls these, so nothing here races with itself for the same pod.
"""

from __future__ import annotations

import asyncio
import os

from pykubelet.api.pod import Pod
from pykubelet.cri import errors
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.kube.events import NORMAL, WARNING, EventRecorder, pod_ref
from pykubelet.pods.actions import compute_pod_actions, is_terminal
from pykubelet.pods.container_start import ContainerStarter, SyncResult
from pykubelet.pods.history import PodHistory
from pykubelet.pods.kill import PodKiller
from pykubelet.pods.podstatus import CONTAINER_CREATING
from pykubelet.runtime import cgroups, resources, specs
from pykubelet.runtime.images import ImageManager
from pykubelet.runtime.service import Runtime
from pykubelet.runtime.state import PodRuntimeState, SandboxState, pod_ip as the_pod_ip
from pykubelet.util.backoff import Backoff
from pykubelet.volumes import api as api_volumes
from pykubelet.util.log import get_logger

log = get_logger(__name__)


class PodSyncer:
    """One pod's sync, as numbered steps; what the worker calls to stop or clean up is kill.py's."""

    def __init__(self, cri: Runtime, images: ImageManager, restart_backoff: Backoff, recorder: EventRecorder,
                 node: specs.NodeFacts | None = None, api: api_volumes.ApiClients | None = None,
                 history: PodHistory | None = None):
        self.cri = cri
        self.history = history or PodHistory(restart_backoff.clock)  # what explain tells (pods/history.py)
        self.node = node or specs.NodeFacts()
        self.api = api  # None: standalone, no ConfigMaps, Secrets, tokens or Services
        self.api_volumes = api_volumes.ApiVolumes(self.node.root_dir, self.node.allocatable, api)
        self.mount_backoff = Backoff(initial=1.0, maximum=30.0, clock=restart_backoff.clock)
        self.sandbox_backoff = Backoff(initial=1.0, maximum=60.0, clock=restart_backoff.clock)
        self.recorder = recorder
        self.killer = PodKiller(cri, recorder, self.node, self.api_volumes,
                                (self.mount_backoff, restart_backoff, self.sandbox_backoff), self.history)
        self.starter = ContainerStarter(cri, images, restart_backoff, recorder, self.node, api,
                                        self.killer.stop_container, self.history)

    def _event(self, pod: Pod, container: str | None, kind: str, reason: str, message: str) -> None:
        self.recorder.record(pod_ref(pod.namespace, pod.name, pod.uid, container), kind, reason, message)

    async def prune(self, state: PodRuntimeState) -> bool:
        return await self.killer.prune(state)

    async def kill(self, pod: Pod | None, state: PodRuntimeState, grace: int) -> None:
        """Stop the pod's containers (preStop first) and sandboxes; remove nothing."""
        await self.killer.kill_pod(pod, state, grace)

    async def terminate(self, pod: Pod | None, state: PodRuntimeState, grace: int) -> None:
        await self.killer.terminate(pod, state, grace)

    async def sync(self, pod: Pod, state: PodRuntimeState, unhealthy: dict[str, str] | None = None,
                   kill_graces: dict[str, int] | None = None,
                   unstarted: frozenset[str] | set[str] = frozenset()) -> SyncResult:
        """`unhealthy`: container ID -> why its liveness or startup probe gave up (it is restarted);
        `kill_graces`: container ID -> the grace period of such a kill when its probe sets one;
        `unstarted`: running containers whose startup probe has not succeeded yet."""
        result = SyncResult()
        grace = pod.termination_grace_period_seconds
        # 1. What to do, from the spec and the runtime's state alone (pods/actions.py).
        actions = compute_pod_actions(pod, state, unhealthy, unstarted)
        finished = is_terminal(pod, state)
        # 2. Kill the pod when its sandbox is replaced; stop the sandbox of a pod done for good.
        if actions.create_sandbox and state.sandboxes:
            self._event(pod, None, NORMAL, "SandboxChanged", "Pod sandbox changed, it will be killed and re-created.")
        if actions.kill_pod:
            await self.killer.kill_pod(pod, state, grace)
            result.changed = True
        elif finished and any(s.ready for s in state.sandboxes):
            log.info("Pod has finished; stopping its sandbox", pod=pod.full_name)
            await self.killer.stop_sandboxes(state)
            result.changed = True
        # 3. Kill the containers that must not run (changed spec, failed probe, old sandbox).
        if actions.kill:
            names = {c.id: c.name for c in state.containers}
            pod_ip = self.killer.pod_ip(pod, state)
            graces = kill_graces or {}
            await asyncio.gather(*(self.killer.stop_container(pod, names.get(cid, ""), cid, why,
                                                              graces.get(cid, grace), pod_ip)
                                   for cid, why in actions.kill.items()))
            result.changed = True
        # 4. Volumes: set up before any container starts; a finished pod's are torn down.
        if finished:
            await self.api_volumes.teardown(pod)
        elif not actions.kill_pod and not await self._mount_volumes(pod, actions.start, result):
            return result
        if not actions.start:
            return result
        # 5. The sandbox: kept, or created (with its back-off).
        sandbox_config = specs.sandbox_config(pod, actions.attempt, self.node.pod_logs_dir, self.node.dns,
                                              self.node.cgroup_driver, self.node.kubepods)
        sandbox_id, sandbox = actions.sandbox_id, None if actions.create_sandbox else state.sandbox
        if actions.create_sandbox:
            created = await self._create_sandbox(pod, sandbox_config, actions.start, result)
            if created is None:
                return result
            sandbox_id, sandbox = created.id, created
            result.changed = True
        # 6. Start the containers, in order (init containers one at a time: compute_pod_actions).
        pod_ip = the_pod_ip(pod.host_network, sandbox, self.node.host_ip)
        by_name = {c.name: c for c in (*pod.init_containers, *pod.containers, *pod.ephemeral_containers)}
        for name in actions.start:
            result.changed |= await self.starter.start(pod, by_name[name], state.latest(name), sandbox_id,
                                                       sandbox_config, pod_ip, result)
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
        kinds = {v.name: v.kind for v in pod.volumes if v.name in paths}
        if not [name for name in failed if not api_volumes.is_set_up(paths[name])]:
            self.mount_backoff.forget(pod.uid)
            self.history.volumes(pod, kinds, failed, None)
            return True
        key = f"{pod.uid}_mount"
        if starting:
            for name in starting:
                result.waiting[name] = (CONTAINER_CREATING, "")
            self.mount_backoff.next(key, self.mount_backoff.clock())
            result.retry_after(self.mount_backoff.delay(key))  # a watched object's change comes sooner
        self.history.volumes(pod, kinds, failed, self.mount_backoff.delay(key))
        return False

    async def _create_sandbox(self, pod: Pod, config: api.PodSandboxConfig, starting: list[str],
                              result: SyncResult) -> SandboxState | None:
        """RunPodSandbox (with the pod's log directory and cgroup first); None when it failed or
        its back-off has not ended (`result` says why and when to try again)."""
        key = f"{pod.uid}_sandbox"
        if self.sandbox_backoff.in_backoff_since_update(key):
            result.retry_after(self.sandbox_backoff.delay(key))
            return None
        os.makedirs(config.log_directory, mode=0o755, exist_ok=True)
        try:
            await asyncio.to_thread(cgroups.ensure_pod_cgroup, config.linux.cgroup_parent,
                                    resources.pod_cgroup_resources(pod), self.node.cgroup_root)
        except OSError as e:  # the containers still get their own limits (a slice systemd refused, too)
            log.warning("Could not set up the pod cgroup", pod=pod.full_name, cgroup=config.linux.cgroup_parent,
                        err=str(e))
        began = asyncio.get_running_loop().time()
        try:
            sandbox_id = await self.cri.run_pod_sandbox(config)
            # Verbose: containerd adds the netns and the CNI result, for the pod's history.
            status = await self.cri.pod_sandbox_status(sandbox_id, verbose=True)
            ip = status.status.network.ip
        except errors.CRIError as e:
            self.sandbox_backoff.next(key, self.sandbox_backoff.clock())
            self.history.sandbox_failed(pod, config.metadata.attempt, e.details, self.sandbox_backoff.delay(key))
            log.error("Failed to create pod sandbox", pod=pod.full_name, err=str(e))
            self._event(pod, None, WARNING, "FailedCreatePodSandBox", f"Failed to create pod sandbox: {e.details}")
            for name in starting:
                result.waiting[name] = (CONTAINER_CREATING, f"Failed to create pod sandbox: {e.details}")
            result.retry_after(self.sandbox_backoff.delay(key))
            return None
        log.info("Created pod sandbox", pod=pod.full_name, sandbox=sandbox_id[:13], attempt=config.metadata.attempt)
        self.history.sandbox_created(pod, sandbox_id, config.metadata.attempt, ip,
                                     asyncio.get_running_loop().time() - began, dict(status.info))
        return SandboxState(id=sandbox_id, attempt=config.metadata.attempt, ready=True, created_at=0.0, ip=ip)
