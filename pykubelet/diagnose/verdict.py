"""The one line that answers "why is this pod not Running/Ready?", from what the agent recorded.

Input is what /debug/pods/<namespace>/<name> serves: the pod with the status the agent computed,
and its step history (pods/history.py). The rules follow the order a pod comes up in, so the
first thing that blocks it is the answer: admission, volumes, the sandbox, then each container
(init containers first) — its image, its configuration, its runs — and last, once everything
runs, readiness. Nothing here guesses from log text: every fact is a recorded step or a status
field, and the line says when the agent tries again.
"""

from __future__ import annotations

import time
from typing import Any

from pykubelet.util.durations import format_duration

CREATING = ("ContainerCreating", "PodInitializing")


def _in(seconds: float) -> str:
    return f"in {format_duration(seconds)}" if seconds >= 0.5 else "now"


def _retry(step: dict[str, Any] | None, now: float, what: str = "next try") -> str:
    retry_at = (step or {}).get("details", {}).get("retry_at")
    return f"; {what} {_in(retry_at - now)}" if retry_at else ""


def _last(steps: list[dict[str, Any]], kind: str, container: str | None = None) -> dict[str, Any] | None:
    for step in reversed(steps):
        if step["kind"] == kind and (container is None or step["container"] == container):
            return step
    return None


def _statuses(status: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [("init container" if key == "initContainerStatuses" else "container", cs)
            for key in ("initContainerStatuses", "containerStatuses") for cs in status.get(key) or []]


def referenced_by(spec: dict[str, Any], kind: str, name: str) -> list[str]:
    """Where the pod spec refers to a ConfigMap or Secret (kind "configmap"/"secret") by name."""
    key, ref, from_ref, volume_key = (("configMapKeyRef", "configMapRef", "configMap", "name") if kind == "configmap"
                                      else ("secretKeyRef", "secretRef", "secret", "secretName"))
    found = []
    for group in ("initContainers", "containers"):
        for c in spec.get(group) or []:
            for var in c.get("env") or []:
                if ((var.get("valueFrom") or {}).get(key) or {}).get("name") == name:
                    found.append(f'container "{c.get("name")}" env {var.get("name")} (valueFrom.{key})')
            for source in c.get("envFrom") or []:
                if (source.get(ref) or {}).get("name") == name:
                    found.append(f'container "{c.get("name")}" envFrom.{ref}')
    for volume in spec.get("volumes") or []:
        if (volume.get(from_ref) or {}).get(volume_key) == name:
            found.append(f'volume "{volume.get("name")}"')
    return found


def _missing_object(message: str, spec: dict[str, Any]) -> str:
    """' (referenced by env X ...)' when the message is a missing ConfigMap or Secret."""
    for kind in ("configmap", "secret"):
        marker = f'{kind} "'
        if message.startswith(marker) and message.endswith('" not found'):
            refs = referenced_by(spec, kind, message[len(marker):-len('" not found')])
            return f" (used by {', '.join(refs)})" if refs else ""
    return ""


def _container_problem(kind: str, cs: dict[str, Any], steps: list[dict[str, Any]], spec: dict[str, Any],
                       now: float) -> str | None:
    """Why one container does not run, if its waiting reason says it cannot (not merely "not yet")."""
    name = cs["name"]
    waiting = (cs.get("state") or {}).get("waiting") or {}
    reason, message = waiting.get("reason", ""), waiting.get("message", "")
    if not reason or reason in CREATING:
        return None
    who = f'{kind} "{name}"'
    if reason in ("ErrImagePull", "ImagePullBackOff"):
        failed = _last(steps, "image", name)
        error = (failed or {}).get("details", {}).get("message") or message
        return f"{who} has no image: {error}{_retry(failed, now, 'next pull')}"
    if reason == "ErrImageNeverPull":
        return f"{who} has no image: {message} (imagePullPolicy: Never, so the node never pulls it)"
    if reason == "CreateContainerConfigError":
        failed = _last(steps, "container", name)
        return f"{who} cannot be configured: {message}{_missing_object(message, spec)}{_retry(failed, now)}"
    if reason == "CrashLoopBackOff":
        exit_step = _last(steps, "exit", name)
        backoff = _last(steps, "back-off", name)
        last = ((cs.get("lastState") or {}).get("terminated")) or {}
        code = last.get("exitCode", (exit_step or {}).get("details", {}).get("exit_code", "?"))
        how = f"exited with code {code}" + (f" ({last['reason']})" if last.get("reason") else "")
        restarts = cs.get("restartCount", 0)
        delay = (backoff or {}).get("details", {}).get("delay")
        wait = f"; back-off {format_duration(delay)}" if delay else ""
        return (f"{who} keeps crashing: it {how}, {restarts} restart{'s' if restarts != 1 else ''} so far"
                f"{wait}{_retry(backoff, now, 'next start')}")
    if reason in ("CreateContainerError", "RunContainerError"):
        verb = "create" if reason == "CreateContainerError" else "start"
        return f"the runtime cannot {verb} {who}: {message}"
    if reason == "PostStartHookError":
        return f"{who} was killed because its postStart hook failed: {message}"
    return f"{who} is waiting: {reason}" + (f": {message}" if message else "")


def _probe(probes: list[dict[str, Any]], container: str, kind: str) -> dict[str, Any] | None:
    return next((p for p in probes if p["container"] == container and p["probe"] == kind), None)


def _not_ready(cs: dict[str, Any], spec_container: dict[str, Any], probes: list[dict[str, Any]],
               now: float) -> str:
    """Why a running container is not ready: its startup or readiness probe."""
    name = cs["name"]
    for kind in ("startupProbe", "readinessProbe"):
        if not spec_container.get(kind):
            continue
        probe = _probe(probes, name, kind)
        label = kind.removesuffix("Probe")
        if probe is None:
            delay = spec_container[kind].get("initialDelaySeconds") or 0
            return (f'container "{name}" is waiting for the first result of its {label} probe'
                    + (f" (initialDelaySeconds: {delay})" if delay else ""))
        if not probe["ok"]:
            failures = f"{probe['streak']} failure{'s' if probe['streak'] != 1 else ''} in a row"
            return (f'container "{name}" fails its {label} probe: {probe["message"] or "(no output)"} '
                    f"({failures}, for {format_duration(now - probe['since'])})")
    if not (cs.get("state") or {}).get("running"):
        return f'container "{name}" is not running'
    return f'container "{name}" is running but not ready yet'


def why(pod: dict[str, Any] | None, history: dict[str, Any] | None, now: float) -> tuple[bool, str]:
    """(is the pod Running and Ready?, the one line that says why not — or that it is)."""
    steps = (history or {}).get("steps") or []
    probes = (history or {}).get("probes") or []
    if pod is None:
        ended = next((s for s in reversed(steps) if s["details"].get("why")), None)
        if ended is None:
            return False, "Gone: this node no longer runs the pod"
        when = time.strftime("%H:%M:%S", time.localtime(ended["at"]))
        return False, f"Gone: {ended['details']['why']} at {when}; this node no longer runs it"
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    phase = status.get("phase", "")
    admission = _last(steps, "admission")
    if phase == "Failed" and status.get("message"):
        return False, f"Failed: {status['message']}"
    if admission is not None and admission["ok"] is False:
        return False, f"Not running: {admission['text']}"
    if phase == "Succeeded":
        return False, ("Completed: every container exited with code 0, and restartPolicy "
                       f"{spec.get('restartPolicy', 'Always')} does not start them again")
    if phase == "Failed":
        for _, cs in _statuses(status):
            term = (cs.get("state") or {}).get("terminated") or {}
            if term.get("exitCode"):
                return False, (f'Failed: container "{cs["name"]}" exited with code {term["exitCode"]}'
                               f" ({term.get('reason', 'Error')}), and restartPolicy "
                               f"{spec.get('restartPolicy', 'Always')} does not restart it")
        return False, "Failed"
    lifecycle = next((s for s in reversed(steps) if s["kind"] in ("admission", "termination")), None)
    if (pod.get("metadata") or {}).get("deletionTimestamp") or (lifecycle or {}).get("kind") == "termination":
        stop = _last(steps, "stop")
        return False, "Terminating: " + (stop["text"] if stop else "its containers are being stopped")
    # A crash-looping pod's phase stays Running; what a person means by "running" is a container that runs.
    running = phase == "Running" and any("running" in (cs.get("state") or {}) for cs in status.get("containerStatuses") or [])
    prefix = "Running but not Ready" if running else "Not running"
    volumes = _last(steps, "volumes")
    if phase != "Running" and volumes is not None and volumes["ok"] is False:
        return False, (f"{prefix}: {volumes['text']}; the containers start once every volume is set up"
                       f"{_retry(volumes, now)}")
    sandbox = _last(steps, "sandbox")
    if phase != "Running" and sandbox is not None and sandbox["ok"] is False:
        return False, f"{prefix}: the pod {sandbox['text']}{_retry(sandbox, now)}"
    for kind, cs in _statuses(status):
        problem = _container_problem(kind, cs, steps, spec, now)
        if problem:
            return False, f"{prefix}: {problem}"
    if phase != "Running":
        running_init = [cs["name"] for kind, cs in _statuses(status)
                        if kind == "init container" and (cs.get("state") or {}).get("running")]
        if running_init:
            return False, (f'Not running yet: init container "{running_init[0]}" is running; the app containers '
                           "start once it exits with code 0")
        last = steps[-1]["text"] if steps else "nothing yet"
        return False, f"Not running yet: the node is still setting it up (last step: {last})"
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
    if ready.get("status") == "True":
        count = len(status.get("containerStatuses") or [])
        return True, f"Running and Ready: {count} of {count} container{'s' if count != 1 else ''} ready"
    by_name = {c.get("name"): c for c in (*(spec.get("initContainers") or []), *(spec.get("containers") or []))}
    for _, cs in _statuses(status):
        if not cs.get("ready") and not (cs.get("state") or {}).get("terminated"):
            return False, f"{prefix}: {_not_ready(cs, by_name.get(cs['name'], {}), probes, now)}"
    return False, f"{prefix}: {ready.get('reason', '')} {ready.get('message', '')}".rstrip()
