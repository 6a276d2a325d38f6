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
from pykubelet.kube.events import NORMAL, WARNING
from pykubelet.pods.actions import PodActions, compute_pod_actions, is_terminal
from pykubelet.pods import resize
from pykubelet.pods.history import PodHistory
from pykubelet.pods.resize_actuate import ResizeError
from pykubelet.pods.podstatus import CONTAINER_CREATING
from pykubelet.pods.step_result import (Action, Event, LogLine, SandboxFacts, StepResult, SyncResult, VolumeFacts,
                                        Waiting)
from pykubelet.pods.sync_parts import SyncParts
from pykubelet.runtime import cgroups, resources, specs
from pykubelet.runtime.service import Runtime
from pykubelet.runtime.state import PodRuntimeState, SandboxState, pod_ip as the_pod_ip
from pykubelet.volumes import api as api_volumes
from pykubelet.volumes import local as local_volumes
from pykubelet.volumes import support as volume_support
from pykubelet.util.log import get_logger

log = get_logger(__name__)


RESIZE_RETRY_SECONDS = 10.0


def _merge_restarts(actions: PodActions, plan: resize.ResizePlan) -> None:
    """Containers whose resize policy asks for a restart are stopped and started like any other
    (one already being replaced needs nothing more)."""
    for container_id, why in plan.restart.items():
        if container_id not in actions.kill:
            actions.kill[container_id] = why
    for name in plan.restart_names:
        if name not in actions.start:
            actions.start.append(name)


class PodSyncer:
    """One pod's sync, as numbered steps; what the worker calls to stop or clean up is kill.py's.

    Each step's outcome goes through the reporter (pods/step_reporter.py) into the sync's result."""

    def __init__(self, parts: SyncParts):
        self.parts = parts
        self.cri: Runtime = parts.cri
        self.node = parts.node
        self.api_volumes = parts.api_volumes
        self.backoffs = parts.backoffs
        self.reporter = parts.reporter
        self.killer = parts.killer
        self.starter = parts.starter

    @property
    def history(self) -> PodHistory:
        """What explain tells (pods/history.py): every result the reporter told."""
        return self.parts.history

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
        # 1. What to do, from the spec and the runtime's state alone (pods/actions.py).
        actions = compute_pod_actions(pod, state, unhealthy, unstarted)
        finished = is_terminal(pod, state)
        # ...and the resize of running containers (pods/resize.py): a RestartContainer policy
        # makes it a restart, the rest is applied in place at step 5.
        plan = resize.compute_resize(pod, state, self.parts.resize_state.actuated_of(pod.uid))
        _merge_restarts(actions, plan)
        # 2. Kill the pod when its sandbox is replaced; stop the sandbox of a pod done for good.
        result.changed = await self._stop_pod(pod, state, actions, finished)
        # 3. Kill the containers that must not run (changed spec, failed probe, old sandbox).
        result.changed |= await self._stop_containers(pod, state, actions, kill_graces or {})
        # 4. Volumes: set up before the sandbox and any container, also for a replaced sandbox
        # (the kubelet waits for them on every sync); a finished pod's are torn down.
        stopped_for_good = actions.kill_pod and not actions.create_sandbox
        if finished:
            await self.api_volumes.teardown(pod)
        elif not stopped_for_good and not await self._mount_volumes(pod, actions.start, result):
            return result
        # 5. Resize the running containers in place (the kubelet does it before it starts any).
        if any(plan.updates.values()) and not finished and not actions.kill_pod:
            await self._resize(pod, plan, result)
        if not actions.start:
            return result
        # 6. The sandbox: kept, or created (with its back-off).
        sandbox_config = specs.sandbox_config(pod, actions.attempt, self.node.pod_logs_dir, self.node.dns,
                                              self.node.cgroup_driver, self.node.kubepods)
        sandbox_id, sandbox = actions.sandbox_id, None if actions.create_sandbox else state.sandbox
        if actions.create_sandbox:
            created = await self._create_sandbox(pod, sandbox_config, actions.start, result)
            if created is None:
                return result
            sandbox_id, sandbox = created.id, created
            result.changed = True
        # 7. Start the containers, in order (init containers one at a time: compute_pod_actions).
        pod_ip = the_pod_ip(pod.host_network, sandbox, self.node.host_ip)
        by_name = {c.name: c for c in (*pod.init_containers, *pod.containers, *pod.ephemeral_containers)}
        for name in actions.start:
            container = by_name[name]
            target = state.latest(container.target_container_name) if container.target_container_name else None
            touched = await self.starter.start(pod, container, state.latest(name), sandbox_id,
                                               sandbox_config, pod_ip, result, target)
            if touched:  # it runs with its allocated resources: the record a resize starts from
                await self.parts.resize_state.set_actuated(pod, [name])
            result.changed |= touched
        return result

    async def _resize(self, pod: Pod, plan: resize.ResizePlan, result: SyncResult) -> None:
        result.resized = True  # the runtime reports the new resources
        try:
            await self.parts.resizer.resize(pod, plan)
        except ResizeError as e:
            result.resize_error = str(e)
            log.warning("Could not resize the pod in place; will retry", pod=pod.full_name, err=str(e))
            result.retry_after(RESIZE_RETRY_SECONDS)

    async def _stop_pod(self, pod: Pod, state: PodRuntimeState, actions: PodActions, finished: bool) -> bool:
        """True if the runtime was touched."""
        if actions.create_sandbox and state.sandboxes:
            self.reporter.event(pod, None, NORMAL, "SandboxChanged",
                                "Pod sandbox changed, it will be killed and re-created.")
        if actions.kill_pod:
            await self.killer.kill_pod(pod, state, pod.termination_grace_period_seconds)
            return True
        if finished and any(s.ready for s in state.sandboxes):
            log.info("Pod has finished; stopping its sandbox", pod=pod.full_name)
            await self.killer.stop_sandboxes(state)
            return True
        return False

    async def _stop_containers(self, pod: Pod, state: PodRuntimeState, actions: PodActions,
                               kill_graces: dict[str, int]) -> bool:
        """True if the runtime was touched."""
        if not actions.kill:
            return False
        names = {c.id: c.name for c in state.containers}
        pod_ip = self.killer.pod_ip(pod, state)
        grace = pod.termination_grace_period_seconds
        await asyncio.gather(*(self.killer.stop_container(pod, names.get(cid, ""), cid, why,
                                                          kill_graces.get(cid, grace), pod_ip)
                               for cid, why in actions.kill.items()))
        return True

    async def _mount_volumes(self, pod: Pod, starting: list[str], result: SyncResult) -> bool:
        """Set up the pod's volumes; True once every one a container needs is set up.

        Like the kubelet's volume manager, before the sandbox: no container (and no sandbox)
        starts while a volume is missing. A volume the node cannot process (a type it has no
        plugin for, a claim not bound) sets up nothing; the others are set up each on its
        own, emptyDir and hostPath only when a container is to start (the kubelet sets them up
        once), claims once each (volumes/claim_volumes.py), the API volumes on every sync, where
        a later failure (an object deleted) keeps the last content and is only reported.
        """
        resolved, claim_errors = await self.api_volumes.claims.resolve(pod)
        order = {v.name: i for i, v in enumerate(pod.volumes)}
        unprocessable = sorted(volume_support.unprocessable_volumes(pod) + claim_errors, key=lambda u: order[u.volume])
        if unprocessable:
            self._report_unprocessable(pod, unprocessable, starting, result)
            return False
        failed = await self.api_volumes.setup(pod)
        paths = api_volumes.volume_paths(self.node.root_dir, pod)
        blocking = [name for name in failed if not api_volumes.is_set_up(paths[name])]
        if starting:
            local_failed = await asyncio.to_thread(local_volumes.try_setup_volumes, self.node.root_dir, pod)
            failed.update(local_failed)
            blocking += list(local_failed)
        # Claims are set up whenever one is not yet (after an agent restart, a running pod's too).
        messages = {name: ("FailedMount", f'MountVolume.SetUp failed for volume "{name}" : {why}')
                    for name, why in failed.items()}
        for failure in await self.api_volumes.claims.setup(pod, resolved):
            failed[failure.volume] = failure.error
            messages[failure.volume] = (failure.reason, failure.message)
            blocking.append(failure.volume)
        claims = self.api_volumes.claims.mounts_of(pod.uid)
        backoff, key = self.backoffs.mount, f"{pod.uid}_mount"
        retry_in = None
        if not blocking:
            backoff.forget(pod.uid)
        elif starting:
            backoff.next(key, backoff.clock())
            retry_in = backoff.delay(key)  # a watched object's change comes sooner
        kinds = tuple((v.name, v.kind) for v in pod.volumes if v.name in paths or v.name in failed or v.name in claims)
        self.reporter.report(pod, StepResult(
            Action.SET_UP_VOLUMES, "", VolumeFacts(kinds, tuple(failed.items())),
            "FailedMount" if failed else "", "; ".join(f"{name}: {why}" for name, why in failed.items()),
            retry_in=retry_in,
            events=tuple(Event(WARNING, reason, message) for reason, message in messages.values()),
            logs=tuple(LogLine("warning", "MountVolume.SetUp failed", (("volume", name), ("err", why)))
                       for name, why in failed.items()),
            waiting=tuple(Waiting(name, CONTAINER_CREATING) for name in starting) if blocking else ()), result)
        return not blocking

    def _report_unprocessable(self, pod: Pod, unprocessable: list[volume_support.Unprocessable],
                              starting: list[str], result: SyncResult) -> None:
        """The kubelet's pod-level FailedMount (`Unable to attach or mount volumes: ...`), tried
        again after its pod worker's back-off."""
        message = volume_support.unable_to_mount_message(unprocessable,
                                                         sorted(volume_support.used_volume_names(pod)))
        self.reporter.report(pod, StepResult(
            Action.SET_UP_VOLUMES, "", VolumeFacts(tuple((u.volume, u.kind) for u in unprocessable),
                                                   tuple((u.volume, u.error) for u in unprocessable)),
            "FailedMount", message, retry_in=volume_support.RETRY_SECONDS,
            events=(Event(WARNING, "FailedMount", message),),
            logs=(LogLine("error", "Unable to attach or mount volumes for pod; skipping pod", (("err", message),)),),
            waiting=tuple(Waiting(name, CONTAINER_CREATING) for name in starting)), result)

    async def _create_sandbox(self, pod: Pod, config: api.PodSandboxConfig, starting: list[str],
                              result: SyncResult) -> SandboxState | None:
        """RunPodSandbox (with the pod's log directory and cgroup first); None when it failed or
        its back-off has not ended (`result` says why and when to try again)."""
        backoff, key, attempt = self.backoffs.sandbox, f"{pod.uid}_sandbox", config.metadata.attempt
        if backoff.in_backoff_since_update(key):
            self.reporter.report(pod, StepResult(Action.CREATE_SANDBOX, "", SandboxFacts(attempt, in_backoff=True),
                                                 "BackOff", "waiting out the back-off of the last failure",
                                                 retry_in=backoff.delay(key)), result)
            return None
        await asyncio.to_thread(os.makedirs, config.log_directory, mode=0o755, exist_ok=True)
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
            backoff.next(key, backoff.clock())
            message = f"Failed to create pod sandbox: {e.details}"
            self.reporter.report(pod, StepResult(
                Action.CREATE_SANDBOX, "", SandboxFacts(attempt), "FailedCreatePodSandBox", e.details,
                retry_in=backoff.delay(key), events=(Event(WARNING, "FailedCreatePodSandBox", message),),
                logs=(LogLine("error", "Failed to create pod sandbox", (("err", str(e)),)),),
                waiting=tuple(Waiting(name, CONTAINER_CREATING, message) for name in starting)), result)
            return None
        self.reporter.report(pod, StepResult(
            Action.CREATE_SANDBOX, sandbox_id, SandboxFacts(attempt, ip, tuple(status.info.items())),
            seconds=asyncio.get_running_loop().time() - began,
            logs=(LogLine("info", "Created pod sandbox", (("sandbox", sandbox_id[:13]), ("attempt", attempt))),)),
            result)
        return SandboxState(id=sandbox_id, attempt=attempt, ready=True, created_at=0.0, ip=ip)
