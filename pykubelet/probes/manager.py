"""Probe workers: one asyncio task per (container, probe kind), with the kubelet's timing.

initialDelaySeconds after the container started, then every periodSeconds; a result flips
after successThreshold successes or failureThreshold failures in a row. Until the startup probe
succeeds, liveness and readiness are not run; once it has, it stops. Results are only recorded
here; the pod worker acts on them (restarting a container whose liveness or startup probe
failed), so it stays the only writer of the pod's runtime state. How results become a pod's
container statuses is probes/readiness.py's (update_pod_status).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from pykubelet.api.pod import Container, Pod
from pykubelet.api.pod_status import PodStatus
from pykubelet.api.probe import Probe
from pykubelet.kube.events import WARNING, EventRecorder, pod_ref
from pykubelet.probes import readiness
from pykubelet.probes.check import run_probe
from pykubelet.runtime.service import Runtime
from pykubelet.util import metrics
from pykubelet.util.log import get_logger

log = get_logger(__name__)

_EVENT_NAME = {"startupProbe": "Startup", "livenessProbe": "Liveness", "readinessProbe": "Readiness"}


@dataclass
class ContainerProbes:
    """What the probes of one running container have concluded so far (None: no result yet)."""

    startup_probed: bool = False
    readiness_probed: bool = False
    started: bool | None = None
    ready: bool | None = None
    failed: str = ""  # "", or why liveness/startup gave up: the container must be restarted
    failed_grace: int | None = None  # the terminationGracePeriodSeconds of the probe that gave up, if it sets one
    tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)  # probe kind -> its loop


def _probes_of(container: Container) -> dict[str, Probe]:
    return {kind: probe for kind, probe in (("startupProbe", container.startup_probe),
                                            ("livenessProbe", container.liveness_probe),
                                            ("readinessProbe", container.readiness_probe)) if probe is not None}


class ProbeManager:
    def __init__(self, cri: Runtime, recorder: EventRecorder, wake: Callable[[str], None],
                 clock: Callable[[], float] = time.time,
                 observe: Callable[[Any, str, str, bool, str], None] | None = None):
        self.cri = cri
        self.observe = observe  # (pod, container, probe kind, ok, output): every result, for the pod's history
        self.recorder = recorder
        self.on_change = wake  # the pod workers' one wake-up path (pods/wakeups.py)
        self.clock = clock  # wall clock: containers' start times are the runtime's
        self.started_at = clock()  # the agent's start: containers older than it ran across a restart
        self._pods: dict[str, dict[str, ContainerProbes]] = {}  # pod UID -> container ID -> results

    def update_pod_status(self, pod: Pod, status: PodStatus) -> None:
        """Set `started` and `ready` on every container status of `status` (the kubelet's
        UpdatePodStatus); the rules are readiness.update_pod_status's."""
        results = {cid: readiness.ProbeResults(r.started, r.ready) for cid, r in self._pods.get(pod.uid, {}).items()}
        readiness.update_pod_status(pod, status, results, self.started_at)

    def unhealthy(self, uid: str) -> dict[str, str]:
        """Container ID -> why its liveness or startup probe gave up."""
        return {cid: r.failed for cid, r in self._pods.get(uid, {}).items() if r.failed}

    def unstarted(self, uid: str) -> set[str]:
        """IDs of the pod's probed containers whose startup probe has not succeeded yet (a
        container seeded as started across an agent restart is not among them)."""
        return {cid for cid, r in self._pods.get(uid, {}).items() if r.startup_probed and r.started is not True}

    def kill_graces(self, uid: str) -> dict[str, int]:
        """Container ID -> the grace period its kill gets, for the failed containers whose probe
        sets its own terminationGracePeriodSeconds (it wins over the pod's, as with the kubelet)."""
        return {cid: r.failed_grace for cid, r in self._pods.get(uid, {}).items()
                if r.failed and r.failed_grace is not None}

    def track(self, pod: Pod, container: Container, container_id: str, pod_ip: str, started_at: float) -> None:
        """Start probing a running container (idempotent per container ID).

        A new container starts not started and not ready (the kubelet's initial results). One
        that ran across an agent restart starts with no results, so the restart rule of
        readiness.py holds until its probes conclude; if its last reported status said it had
        started, that is its startup result (the kubelet seeds a sidecar's the same way)."""
        containers = self._pods.setdefault(pod.uid, {})
        if container_id in containers:
            return
        probes = _probes_of(container)
        across_restart = readiness.ran_before_agent(started_at, self.started_at)
        state = ContainerProbes(startup_probed="startupProbe" in probes, readiness_probed="readinessProbe" in probes)
        if state.startup_probed:
            state.started = across_restart and readiness.reported_started(pod, container.name, container_id)
        if state.readiness_probed and not across_restart:
            state.ready = False
        containers[container_id] = state
        for kind, probe in probes.items():
            if kind == "startupProbe" and state.started:
                continue  # started already: its startup probe is done
            state.tasks[kind] = asyncio.create_task(
                self._guarded(pod, container, container_id, pod_ip, started_at, kind, probe, state),
                name=f"probe-{kind}-{container_id[:8]}")

    def retain(self, uid: str, running: set[str]) -> None:
        """Stop probing the pod's containers that no longer run (all of them for an empty set)."""
        containers = self._pods.get(uid, {})
        for container_id in [c for c in containers if c not in running]:
            for task in containers.pop(container_id).tasks.values():
                task.cancel()
        if not containers:
            self._pods.pop(uid, None)

    def stop_restart_probes(self, uid: str) -> None:
        """The pod is terminating: nothing restarts its containers any more, so their liveness and
        startup probes stop (as the kubelet's do); readiness goes on, and the pod's Ready
        condition follows its containers as they shut down."""
        for state in self._pods.get(uid, {}).values():
            for kind in ("startupProbe", "livenessProbe"):
                task = state.tasks.pop(kind, None)
                if task is not None:
                    task.cancel()

    async def stop(self) -> None:
        """Cancel every probe task and wait until they have all ended (the agent's stop)."""
        tasks = [t for containers in self._pods.values() for state in containers.values()
                 for t in state.tasks.values()]
        self._pods.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _guarded(self, pod: Pod, container: Container, container_id: str, pod_ip: str, started_at: float,
                       kind: str, probe: Probe, state: ContainerProbes) -> None:
        """A probe loop whose unexpected exception is ours to report: logged as a bug, and the
        container treated as failing that probe (so it is not reported healthy on no evidence)."""
        try:
            await self._probe_loop(pod, container, container_id, pod_ip, started_at, kind, probe, state)
        except Exception as e:  # noqa: BLE001  (anything else is a bug in pykubelet, not in the pod)
            log.error("pykubelet bug: a probe task failed; treating the probe as failing", pod=pod.full_name,
                      container=container.name, probe=kind, err=f"{type(e).__name__}: {e}", exc_info=True)
            message = f"probe could not run: {type(e).__name__}"
            if kind == "readinessProbe":
                state.ready = False
            elif kind == "startupProbe":
                state.started, state.failed = False, f"Container failed startup probe, will be restarted: {message}"
            else:
                state.failed = f"Container failed liveness probe, will be restarted: {message}"
            self.on_change(pod.uid)

    async def _probe_loop(self, pod: Pod, container: Container, container_id: str, pod_ip: str,
                          started_at: float, kind: str, probe: Probe, state: ContainerProbes) -> None:
        period = float(probe.period_seconds)
        loop = asyncio.get_running_loop()
        delay = probe.initial_delay_seconds - max(0.0, self.clock() - started_at)
        if delay > 0:
            await asyncio.sleep(delay)
        successes = failures = 0
        while True:
            if kind == "startupProbe" and state.started:
                return  # started: the startup probe is done (the kubelet's)
            if kind == "startupProbe" or not state.startup_probed or state.started:
                began = loop.time()
                ok, message = await run_probe(self.cri, probe, container.ports, container_id, pod_ip)
                successes, failures = (successes + 1, 0) if ok else (0, failures + 1)
                metrics.observe_probe(kind, ok, container.name, pod.name, pod.namespace, pod.uid)
                if self.observe is not None:
                    self.observe(pod, container.name, kind, ok, message)
                ref = pod_ref(pod.namespace, pod.name, pod.uid, container.name)
                if not ok:
                    self.recorder.record(ref, WARNING, "Unhealthy", f"{_EVENT_NAME[kind]} probe failed: {message}")
                elif message:  # it passed, with something to say (a redirect it did not follow)
                    self.recorder.record(ref, WARNING, "ProbeWarning", f"{_EVENT_NAME[kind]} probe warning: {message}")
                if self._apply(kind, state, successes, failures, probe.success_threshold, probe.failure_threshold,
                               message):
                    log.info("Probe result changed", pod=pod.full_name, container=container.name, probe=kind,
                             ready=state.ready, started=state.started, failed=state.failed)
                    self.on_change(pod.uid)
                if state.failed:
                    state.failed_grace = probe.termination_grace_period_seconds
                    return
                await asyncio.sleep(max(0.0, period - (loop.time() - began)))
            else:
                await asyncio.sleep(min(period, 1.0))

    @staticmethod
    def _apply(kind: str, state: ContainerProbes, successes: int, failures: int, success_threshold: int,
               failure_threshold: int, message: str) -> bool:
        """Update state from the streaks; True if anything a user sees changed."""
        before = (state.started, state.ready, state.failed)
        if kind == "startupProbe":
            if successes >= 1:
                state.started = True
            elif failures >= failure_threshold:
                state.failed = f"Container failed startup probe, will be restarted: {message}"
        elif kind == "livenessProbe":
            if failures >= failure_threshold:
                state.failed = f"Container failed liveness probe, will be restarted: {message}"
        elif kind == "readinessProbe":
            if successes >= success_threshold:
                state.ready = True
            elif failures >= failure_threshold:
                state.ready = False
        return before != (state.started, state.ready, state.failed)
