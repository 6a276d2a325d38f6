"""Probe workers: one asyncio task per (container, probe kind), with the kubelet's timing.

initialDelaySeconds after the container started, then every periodSeconds; a result flips
after successThreshold successes or failureThreshold failures in a row. Until the startup probe
succeeds, liveness and readiness are not run. Results are only recorded here; the pod worker
acts on them (restarting a container whose liveness or startup probe failed), so it stays the
only writer of the pod's runtime state.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from pykubelet.kube.events import WARNING, EventRecorder, pod_ref
from pykubelet.probes.check import run_probe
from pykubelet.runtime.service import Runtime
from pykubelet.util import metrics
from pykubelet.util.log import get_logger

log = get_logger(__name__)

KINDS = ("startupProbe", "livenessProbe", "readinessProbe")
_EVENT_NAME = {"startupProbe": "Startup", "livenessProbe": "Liveness", "readinessProbe": "Readiness"}


@dataclass
class ContainerProbes:
    """What the probes of one running container say so far."""

    started: bool = True
    ready: bool = True
    failed: str = ""  # "", or why liveness/startup gave up: the container must be restarted
    failed_grace: int | None = None  # the terminationGracePeriodSeconds of the probe that gave up, if it sets one
    tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)  # probe kind -> its loop


class ProbeManager:
    def __init__(self, cri: Runtime, recorder: EventRecorder, wake: Callable[[str], None],
                 clock: Callable[[], float] = time.time,
                 observe: Callable[[Any, str, str, bool, str], None] | None = None):
        self.cri = cri
        self.observe = observe  # (pod, container, probe kind, ok, output): every result, for the pod's history
        self.recorder = recorder
        self.on_change = wake  # the pod workers' one wake-up path (pods/wakeups.py)
        self.clock = clock  # wall clock: containers' start times are the runtime's
        self._pods: dict[str, dict[str, ContainerProbes]] = {}  # pod UID -> container ID -> results

    def results(self, uid: str, container_id: str) -> ContainerProbes:
        return self._pods.get(uid, {}).get(container_id) or ContainerProbes()

    def unhealthy(self, uid: str) -> dict[str, str]:
        """Container ID -> why its liveness or startup probe gave up."""
        return {cid: r.failed for cid, r in self._pods.get(uid, {}).items() if r.failed}

    def unstarted(self, uid: str) -> set[str]:
        """IDs of the pod's probed containers whose startup probe has not succeeded yet."""
        return {cid for cid, r in self._pods.get(uid, {}).items() if not r.started}

    def kill_graces(self, uid: str) -> dict[str, int]:
        """Container ID -> the grace period its kill gets, for the failed containers whose probe
        sets its own terminationGracePeriodSeconds (it wins over the pod's, as with the kubelet)."""
        return {cid: r.failed_grace for cid, r in self._pods.get(uid, {}).items()
                if r.failed and r.failed_grace is not None}

    def track(self, pod: Any, container: dict[str, Any], container_id: str, pod_ip: str, started_at: float) -> None:
        """Start probing a running container (idempotent per container ID)."""
        containers = self._pods.setdefault(pod.uid, {})
        if container_id in containers:
            return
        probes = {kind: container[kind] for kind in KINDS if container.get(kind)}
        state = ContainerProbes(started="startupProbe" not in probes, ready="readinessProbe" not in probes)
        containers[container_id] = state
        for kind, probe in probes.items():
            state.tasks[kind] = asyncio.create_task(
                self._probe_loop(pod, container, container_id, pod_ip, started_at, kind, probe, state),
                name=f"probe-{kind}-{container_id[:8]}")

    def retain(self, uid: str, running: set[str]) -> None:
        """Stop probing the pod's containers that no longer run (all of them for an empty set)."""
        containers = self._pods.get(uid, {})
        for container_id in [c for c in containers if c not in running]:
            for task in containers.pop(container_id).tasks.values():
                task.cancel()
        if not containers:
            self._pods.pop(uid, None)

    async def stop(self) -> None:
        """The agent stops: every probe loop ends (the containers keep running; the next agent
        probes them again)."""
        tasks = [task for containers in self._pods.values() for state in containers.values()
                 for task in state.tasks.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def stop_restart_probes(self, uid: str) -> None:
        """The pod is terminating: nothing restarts its containers any more, so their liveness and
        startup probes stop (as the kubelet's do); readiness goes on, and the pod's Ready
        condition follows its containers as they shut down."""
        for state in self._pods.get(uid, {}).values():
            for kind in ("startupProbe", "livenessProbe"):
                task = state.tasks.pop(kind, None)
                if task is not None:
                    task.cancel()

    async def _probe_loop(self, pod: Any, container: dict[str, Any], container_id: str, pod_ip: str,
                          started_at: float, kind: str, probe: dict[str, Any], state: ContainerProbes) -> None:
        period = float(probe.get("periodSeconds") or 10)
        success_threshold = int(probe.get("successThreshold") or 1)
        failure_threshold = int(probe.get("failureThreshold") or 3)
        loop = asyncio.get_running_loop()
        delay = float(probe.get("initialDelaySeconds") or 0) - max(0.0, self.clock() - started_at)
        if delay > 0:
            await asyncio.sleep(delay)
        successes = failures = 0
        while True:
            if kind == "startupProbe" or state.started:
                began = loop.time()
                ok, message = await run_probe(self.cri, probe, container, container_id, pod_ip)
                successes, failures = (successes + 1, 0) if ok else (0, failures + 1)
                metrics.observe_probe(kind, ok, container["name"], pod.name, pod.namespace, pod.uid)
                if self.observe is not None:
                    self.observe(pod, container["name"], kind, ok, message)
                ref = pod_ref(pod.namespace, pod.name, pod.uid, container["name"])
                if not ok:
                    self.recorder.record(ref, WARNING, "Unhealthy", f"{_EVENT_NAME[kind]} probe failed: {message}")
                elif message:  # it passed, with something to say (a redirect it did not follow)
                    self.recorder.record(ref, WARNING, "ProbeWarning", f"{_EVENT_NAME[kind]} probe warning: {message}")
                if self._apply(kind, state, successes, failures, success_threshold, failure_threshold, message):
                    log.info("Probe result changed", pod=pod.full_name, container=container["name"], probe=kind,
                             ready=state.ready, started=state.started, failed=state.failed)
                    self.on_change(pod.uid)
                if state.failed:
                    grace = probe.get("terminationGracePeriodSeconds")
                    state.failed_grace = grace if isinstance(grace, int) and not isinstance(grace, bool) else None
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
