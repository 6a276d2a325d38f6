"""Stopping a pod's containers and sandboxes, and cleaning up after a pod that is gone:
the kubelet's killContainer (preStop inside the grace period, then StopContainer), KillPod,
garbage collection of dead instances, and the final cleanup of a removed pod.

Only a pod's worker calls these, so nothing here races with itself for the same pod.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from pykubelet.api.pod import Pod
from pykubelet.api.probe_parse import recorded_handler
from pykubelet.kube.events import NORMAL, WARNING
from pykubelet.pods.step_reporter import StepReporter
from pykubelet.pods.step_result import Action, StepResult, StopFacts, pod_desc
from pykubelet.probes.hooks import run_hook
from pykubelet.runtime import cgroups, data_dirs, gc, log_files, specs
from pykubelet.runtime.service import Runtime
from pykubelet.runtime.state import ContainerState, PodRuntimeState
from pykubelet.util.backoff import Backoff
from pykubelet.volumes import api as api_volumes
from pykubelet.volumes import local as local_volumes
from pykubelet.util import safe_remove
from pykubelet.util.log import get_logger
from pykubelet.util.timeouts import within

log = get_logger(__name__)

MIN_GRACE_AFTER_PRE_STOP = 2  # the kubelet's minimal shutdown window, so a slow preStop does not mean SIGKILL at once


@dataclass(frozen=True)
class PodBackoffs:
    """The back-offs a pod's sync keeps, each keyed by the pod's UID first."""

    restart: Backoff
    """A container that exited (CrashLoopBackOff)."""
    mount: Backoff
    """The pod's volumes."""
    sandbox: Backoff
    """RunPodSandbox."""

    def forget(self, uid: str) -> None:
        for backoff in (self.restart, self.mount, self.sandbox):
            backoff.forget(uid)


class PodKiller:
    def __init__(self, cri: Runtime, reporter: StepReporter, node: specs.NodeFacts,
                 api_volumes: api_volumes.ApiVolumes, backoffs: PodBackoffs):
        self.cri = cri
        self.reporter = reporter
        self.node = node
        self.api_volumes = api_volumes
        self.backoffs = backoffs  # forgotten with the pod

    def pod_ip(self, pod: Pod | None, state: PodRuntimeState) -> str:
        """The address preStop hooks reach the pod at (an orphan's: its sandbox's)."""
        return state.pod_ip(pod is not None and pod.host_network, self.node.host_ip)

    async def stop_container(self, pod: Pod | None, name: str, container_id: str, why: str, grace: int,
                              pod_ip: str = "", message: str = "", recorded: ContainerState | None = None,
                              state: PodRuntimeState | None = None) -> None:
        """The kubelet's killContainer: the preStop hook first, inside the grace period; the
        stop gets what is left (at least MIN_GRACE_AFTER_PRE_STOP seconds).

        Without the pod's spec (an orphan), the hook the container recorded in its annotations runs.
        """
        log.info("Killing container", pod=pod.full_name if pod else "", container=name, id=container_id[:13],
                 reason=why, gracePeriod=grace)
        if pod is not None:
            self.reporter.event(pod, name, NORMAL, "Killing", message or f"Stopping container {name}")
            container = next((c for c in (*pod.init_containers, *pod.containers) if c.name == name), None)
            ports = container.ports if container is not None else ()
            pre_stop, desc = container.pre_stop if container is not None else None, pod_desc(pod)
        else:
            ports = ()
            pre_stop = recorded_handler(recorded.pre_stop) if recorded is not None else None
            desc = pod_desc(state) if state is not None else ""
        loop = asyncio.get_running_loop()
        began, pre_stop_outcome, full_grace = loop.time(), "", grace
        if pre_stop and grace > 0:
            try:
                failure = await within(
                    run_hook(self.cri, pre_stop, name, ports, container_id, pod_ip, desc, grace), grace)
            except asyncio.TimeoutError:
                failure, pre_stop_outcome = "", f"did not finish within {grace}s"
                log.info("PreStop hook not completed in grace period", pod=desc, container=name,
                         gracePeriod=grace)
            if failure:
                # Told as it happens, before the stop it delays: the stop's step records it too.
                log.error("PreStop hook failed", pod=desc, container=name, err=failure)
                if pod is not None:
                    self.reporter.event(pod, name, WARNING, "FailedPreStopHook", failure)
            pre_stop_outcome = pre_stop_outcome or (f"failed: {failure}" if failure else
                                                    f"ran in {loop.time() - began:.1f}s")
            grace = max(MIN_GRACE_AFTER_PRE_STOP, grace - int(loop.time() - began))
        stop_began = loop.time()
        await self.cri.stop_container(container_id, grace)
        uid, namespace, pod_name = (pod.uid, pod.namespace, pod.name) if pod is not None else (
            (state.uid, state.namespace, state.name) if state is not None else ("", "", ""))
        if uid:
            # The runtime sends SIGKILL when the grace period ends: a stop that lasted that long was one.
            killed = grace <= 0 or loop.time() - stop_began >= grace
            self.reporter.report(pod, StepResult(Action.KILL_CONTAINER, name, StopFacts(
                uid, namespace, pod_name, why, full_grace, pre_stop_outcome, killed), seconds=loop.time() - began))

    async def stop_sandboxes(self, state: PodRuntimeState, only_ready: bool = True) -> None:
        await asyncio.gather(*(self.cri.stop_pod_sandbox(s.id) for s in state.sandboxes
                               if s.ready or not only_ready))

    async def kill_pod(self, pod: Pod | None, state: PodRuntimeState, grace: int) -> None:
        """Stop every running container (SIGTERM, SIGKILL after grace), then every sandbox.

        As the kubelet does, sidecars (restartable init containers) go last, one by one in the
        reverse of their order, each within what is left of the grace period: they keep serving
        the app containers (and their preStop hooks) until those have stopped. Stopping a
        sandbox that is already not ready is how its network gets torn down.
        """
        pod_ip = self.pod_ip(pod, state)
        sidecars = [c.name for c in pod.init_containers if c.is_sidecar] if pod is not None else []
        running = state.running()
        loop = asyncio.get_running_loop()
        began = loop.time()

        async def stop(containers: list[ContainerState], seconds: int) -> None:
            await asyncio.gather(*(self.stop_container(pod, c.name, c.id, "Stopping pod", seconds, pod_ip,
                                                        recorded=c, state=state) for c in containers))
        await stop([c for c in running if c.name not in sidecars], grace)
        for name in reversed(sidecars):
            left = max(MIN_GRACE_AFTER_PRE_STOP, grace - int(loop.time() - began))
            await stop([c for c in running if c.name == name], left if grace > 0 else 0)
        await self.stop_sandboxes(state, only_ready=False)

    async def prune(self, state: PodRuntimeState) -> bool:
        """Remove dead containers and sandboxes the GC policy does not keep, with their logs;
        True if anything was removed."""
        containers, sandboxes = gc.dead_to_remove(state)
        for c in state.containers:
            if c.id in containers:
                await self._remove_container(c)
        for sandbox_id in sandboxes:
            await self.cri.remove_pod_sandbox(sandbox_id)
        return bool(containers or sandboxes)

    async def _remove_container(self, c: ContainerState) -> None:
        await self.cri.remove_container(c.id)
        if c.log_path:  # and its rotated files, as the kubelet's log manager cleans them
            try:
                await asyncio.to_thread(log_files.remove_log_files, self.node.pod_logs_dir, c.log_path)
            except FileNotFoundError:
                pass
            except log_files.NotBeneathLogsRoot as e:
                log.warning("Not removing a container log outside the pod logs dir", err=str(e))

    def _remove_pod_dirs(self, namespace: str, name: str, uid: str, volumes: bool = True) -> None:
        """The pod's log directory, then (volumes) its volumes and directory; only ever those
        directories (a UID from an older agent's runtime labels is not trusted to be a plain name)."""
        try:
            if name:
                data_dirs.remove_pod_log_dir(self.node.pod_logs_dir, namespace, name, uid)
            if volumes:
                local_volumes.teardown_volumes(self.node.root_dir, uid)
        except safe_remove.UnsafeName as e:
            log.error("Not removing the files of a pod with an unsafe UID", pod=f"{namespace}/{name}", err=str(e))

    async def terminate(self, pod: Pod | None, state: PodRuntimeState, grace: int) -> None:
        """Stop and remove everything of a pod that is gone (`pod` None: an orphan the runtime
        held), then its log directory, volumes and cgroups."""
        uid = state.uid
        namespace, name = (state.namespace, state.name) if state.name or pod is None else (pod.namespace, pod.name)
        await self.kill_pod(pod, state, grace)
        for c in state.containers:
            await self._remove_container(c)
        for s in state.sandboxes:
            await self.cri.remove_pod_sandbox(s.id)
        # Its CSI volumes through their drivers first; while one is left published (a driver that
        # refused, or is not registered) the pod's directory stays: housekeeping tries again.
        unpublished = await self.api_volumes.claims.unpublish(uid, f"{namespace}/{name}")
        self.api_volumes.forget(uid)
        await asyncio.to_thread(self._remove_pod_dirs, namespace, name, uid, unpublished)
        await asyncio.to_thread(cgroups.remove_pod_cgroups, uid, self.node.cgroup_root, self.node.kubepods)
        self.backoffs.forget(uid)
        log.info("Pod terminated and cleaned up", pod=f"{namespace}/{name}", uid=uid)
        self.reporter.history.terminated(uid, namespace, name)  # the record's end, not a step's result
