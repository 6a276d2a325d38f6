"""What the agent did for each pod, step by step: the facts `pykubelet explain pod` tells.

The pod path records here as it works — admission, volumes, the sandbox (netns, IP, CNI result),
images, each container's create and start (or why not), probe results, exits, back-offs, stops —
so nothing is ever read back from logs. The sync's and the stops' outcomes arrive through
pods/step_reporter.py, the same call that logs them and records their Events, so each has its
step. Recording is cheap and never fails a caller.

Bounded, so a pod that crash-loops for a week costs the same as one that started once: each pod
keeps its first HEAD_STEPS steps (how it came up) and its latest TAIL_STEPS (what happens now),
and counts the ones dropped in between; a step that repeats the one before it only bumps its
count. Probe results are not steps (a probe runs every few seconds): each probe keeps its last
result, its streak and its last failure, and only a change of result is a step. Records of pods
that are gone stay for the last GONE_PODS of them, so a pod that just went can still be explained
(a pod the pod path never saw go, a rejected one say, counts as gone once LIVE_PODS are recorded).

Served as JSON on the local endpoint (/debug/pods/<namespace>/<name>, server/local.py).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import asdict
from typing import Any, Callable

from pykubelet.api.pod import Pod
from pykubelet.pods.history_records import (ADMISSION, BACKOFF, CONTAINER, EXIT, GONE_PODS, HEAD_STEPS, IMAGE,
                                            LIVE_PODS, PROBE, SANDBOX, STOP, TERMINATION, VOLUMES, PodRecord,
                                            ProbeRecord, Step, sandbox_network, short_id, size_text)
from pykubelet.runtime.state import EXITED, RUNNING, PodRuntimeState
from pykubelet.util.durations import format_duration


class PodHistory:
    def __init__(self, clock: Callable[[], float] = time.time, cni_chain: Callable[[], str] | None = None):
        self.clock = clock
        self.cni_chain = cni_chain or (lambda: "")  # the plugins the runtime runs for a sandbox
        self.last_sync = 0.0  # any pod's: the agent's "last sync"
        self._pods: dict[str, PodRecord] = {}
        self._gone: OrderedDict[str, PodRecord] = OrderedDict()

    # --- the record of one pod
    def _pod(self, uid: str, namespace: str = "", name: str = "") -> PodRecord:
        record = self._pods.get(uid) or self._gone.pop(uid, None)
        if record is None:
            record = PodRecord(uid, namespace, name, first_seen=self.clock())
            if len(self._pods) >= LIVE_PODS:
                self._retire(min(self._pods.values(), key=lambda r: r.touched).uid)
        record.gone_at, record.touched = 0.0, self.clock()
        record.namespace, record.name = record.namespace or namespace, record.name or name
        self._pods[uid] = record
        return record

    def _add(self, pod: Pod | PodRecord, kind: str, text: str, ok: bool | None = True, container: str = "",
             seconds: float | None = None, at: float | None = None, **details: Any) -> None:
        record = pod if isinstance(pod, PodRecord) else self._pod(pod.uid, pod.namespace, pod.name)
        now = record.touched = self.clock()
        last = record.last()
        if last is not None and (last.kind, last.container, last.text, last.ok) == (kind, container, text, ok):
            last.count += 1
            last.last_at = now
            last.details.update(details)
            return
        step = Step(at if at is not None else now, kind, text, ok, container, seconds, details, last_at=now)
        if len(record.head) < HEAD_STEPS:
            record.head.append(step)
            return
        if len(record.tail) == record.tail.maxlen:
            record.dropped += 1
        record.tail.append(step)

    # --- the pod path's steps
    def admitted(self, pod: Pod, ignored_fields: list[str]) -> None:
        text = f"admitted ({'a static pod, from its manifest file' if pod.is_static else 'bound to this node'})"
        if ignored_fields:
            text += f"; fields pykubelet ignores: {', '.join(ignored_fields)}"
        self._add(pod, ADMISSION, text)

    def rejected(self, pod: Pod, reason: str, message: str) -> None:
        self._add(pod, ADMISSION, f"rejected at admission: {reason}: {message}", False, reason=reason)

    def terminating(self, pod: Pod, why: str, grace: int | None) -> None:
        text = f"{why}: stopping it" + (f" (grace period {grace}s)" if grace is not None else "")
        self._add(pod, TERMINATION, text, None, grace=grace, why=why)

    def volumes(self, pod: Pod, kinds: dict[str, str], failed: dict[str, str], retry_in: float | None) -> None:
        """The outcome of setting up the pod's API volumes (name -> kind); recorded when it changes."""
        record = self._pod(pod.uid, pod.namespace, pod.name)
        outcome = (tuple(sorted(kinds.items())), tuple(sorted(failed.items())))
        if outcome == record.volumes and not failed:
            return
        record.volumes = outcome
        retry_at = self.clock() + retry_in if retry_in else None
        for name, message in failed.items():
            self._add(record, VOLUMES, f'volume "{name}" ({kinds.get(name, "")}) cannot be set up: {message}', False,
                      volume=name, retry_at=retry_at)
        ready = [f"{name} ({kind})" for name, kind in kinds.items() if name not in failed]
        if ready and not failed:
            self._add(record, VOLUMES, f"volumes ready: {', '.join(ready)}")

    def sandbox_created(self, pod: Pod, sandbox_id: str, attempt: int, ip: str, seconds: float,
                        info: dict[str, str]) -> None:
        network = sandbox_network(info)
        chain = self.cni_chain()
        where = f"IP {ip}" if ip else ("host network" if pod.host_network else "no IP")
        text = f"sandbox {short_id(sandbox_id)} created (attempt {attempt}): {where}"
        if network.get("netns"):
            text += f", netns {network['netns']}"
        if chain and not pod.host_network:
            text += f", CNI {chain}"
        self._add(pod, SANDBOX, text, seconds=seconds, sandbox=sandbox_id, attempt=attempt, ip=ip,
                  cni_chain=chain, **network)

    def sandbox_failed(self, pod: Pod, attempt: int, error: str, retry_in: float) -> None:
        chain = self.cni_chain()
        self._add(pod, SANDBOX, f"sandbox (attempt {attempt}) cannot be created: {error}", False, attempt=attempt,
                  error=error, cni_chain=chain, retry_at=self.clock() + retry_in)

    def image_ready(self, pod: Pod, container: str, image: str, pulled: tuple[float, int] | None) -> None:
        """`pulled`: (seconds, bytes) when it was pulled now; None when it was already there."""
        if pulled is None:
            record = self._pod(pod.uid, pod.namespace, pod.name)
            if (container, image) not in record.present_images:  # not again at every restart
                record.present_images.add((container, image))
                self._add(record, IMAGE, f'image "{image}" already present on the node', container=container,
                          image=image)
            return
        seconds, size = pulled
        self._add(pod, IMAGE, f'image "{image}" pulled' + (f": {size_text(size)}" if size else ""), container=container,
                  seconds=seconds, image=image, bytes=size)

    def image_failed(self, pod: Pod, container: str, image: str, reason: str, message: str, retry_in: float) -> None:
        if reason == "ImagePullBackOff":
            return  # only the wait between two failed pulls: the failed pull before it holds the facts
        self._add(pod, IMAGE, f"{reason}: {message}", False, container, image=image, reason=reason,
                  message=message, retry_at=self.clock() + retry_in if retry_in else None)

    def container_started(self, pod: Pod, container: str, container_id: str, restart_count: int,
                          seconds: float) -> None:
        text = "container created and started" + (f" (restart #{restart_count})" if restart_count else "")
        self._add(pod, CONTAINER, f"{text}, id {short_id(container_id)}", True, container, seconds, id=container_id,
                  restart_count=restart_count)

    def container_failed(self, pod: Pod, container: str, reason: str, message: str, retry_in: float | None) -> None:
        self._add(pod, CONTAINER, f"{reason}: {message}", False, container, reason=reason, message=message,
                  retry_at=self.clock() + retry_in if retry_in else None)

    def restart_backoff(self, pod: Pod, container: str, delay: float, remaining: float, exit_code: int) -> None:
        record = self._pod(pod.uid, pod.namespace, pod.name)
        retry_at = round(self.clock() + remaining)
        if any(s.kind == BACKOFF and s.container == container and s.details.get("retry_at") == retry_at
               for s in list(record.tail)[-10:] or record.head[-10:]):
            return  # the same back-off period, looked at again
        self._add(record, BACKOFF, f"back-off {format_duration(delay)} before starting it again "
                                   f"(it exited with code {exit_code})", False, container, delay=delay,
                  retry_at=retry_at, exit_code=exit_code)

    def probe(self, pod: Any, container: str, kind: str, ok: bool, message: str) -> None:
        """One probe result (ProbeManager's observer); a change of result is a step."""
        record = self._pod(pod.uid, pod.namespace, pod.name)
        now = self.clock()
        last = record.probes.get((container, kind))
        if last is not None and last.ok == ok:
            last.streak, last.at, last.message = last.streak + 1, now, message
        else:
            last = record.probes[(container, kind)] = ProbeRecord(ok, message, now, since=now,
                                                                 last_failure=last.last_failure if last else "",
                                                                 last_failure_at=last.last_failure_at if last else 0)
            name = kind.removesuffix("Probe")
            self._add(record, PROBE, f"{name} probe succeeded" if ok else f"{name} probe failed: {message}", ok,
                      container, probe=kind)
        if not ok:
            last.last_failure, last.last_failure_at = message, now

    def stopped(self, uid: str, namespace: str, name: str, container: str, why: str, grace: int, pre_stop: str,
                seconds: float, killed: bool) -> None:
        how = "SIGKILL at once (no grace period)" if grace <= 0 else (
            f"SIGKILL after the {grace}s grace period" if killed else f"exited on SIGTERM within the {grace}s grace")
        text = f"stopped ({why}): " + (f"preStop {pre_stop}, " if pre_stop else "") + how
        self._add(self._pod(uid, namespace, name), STOP, text, None, container, seconds, grace=grace,
                  pre_stop=pre_stop, sigkill=killed)

    def terminated(self, uid: str, namespace: str, name: str) -> None:
        record = self._pod(uid, namespace, name)
        self._add(record, TERMINATION, "containers, sandboxes, volumes and logs removed", None)
        self._retire(uid)

    def _retire(self, uid: str) -> None:
        record = self._gone[uid] = self._pods.pop(uid)
        record.gone_at = self.clock()
        while len(self._gone) > GONE_PODS:
            self._gone.popitem(last=False)

    def observe(self, state: PodRuntimeState) -> None:
        """What the runtime shows at a sync: exits and dead sandboxes become steps."""
        record = self._pod(state.uid, state.namespace, state.name)
        found, record.observed = not record.observed, True
        record.last_sync = self.last_sync = self.clock()
        for sandbox in state.sandboxes:
            was, now = record.seen.get(sandbox.id), "ready" if sandbox.ready else "notready"
            record.seen[sandbox.id] = now
            if was == "ready" and now == "notready":
                self._add(record, SANDBOX, f"sandbox {short_id(sandbox.id)} stopped", None, sandbox=sandbox.id)
        for c in reversed(state.containers):  # oldest first, as they happened
            was = record.seen.get(c.id)
            record.seen[c.id] = c.state
            if c.state == EXITED and was != EXITED:
                ran = max(0.0, c.finished_at - c.started_at) if c.started_at else None
                text = f"exited with code {c.exit_code}" + (f" ({c.reason})" if c.reason else "")
                if ran is not None:
                    text += f" after {format_duration(ran) if ran >= 10 else f'{ran:.1f}s'}"
                self._add(record, EXIT, text, c.exit_code == 0, c.name, at=c.finished_at or None, id=c.id,
                          exit_code=c.exit_code, reason=c.reason, message=c.message[:500])
            elif c.state == RUNNING and was is None and found:
                self._add(record, CONTAINER, f"running (found in the runtime), id {short_id(c.id)}", True, c.name, id=c.id)
        live = {s.id for s in state.sandboxes} | {c.id for c in state.containers}
        for gone in [i for i in record.seen if i not in live]:
            del record.seen[gone]

    # --- reading
    def find(self, namespace: str, name: str, uid: str = "") -> PodRecord | None:
        """A pod's record by UID, else by name (the running pod's first, then the newest gone)."""
        if uid and (uid in self._pods or uid in self._gone):
            return self._pods.get(uid) or self._gone[uid]
        matches = [r for r in self._pods.values() if (r.namespace, r.name) == (namespace, name)]
        matches += [r for r in reversed(self._gone.values()) if (r.namespace, r.name) == (namespace, name)]
        return matches[0] if matches else None

    def snapshot(self, namespace: str, name: str, uid: str = "") -> dict[str, Any] | None:
        record = self.find(namespace, name, uid)
        if record is None:
            return None
        return {
            "uid": record.uid, "namespace": record.namespace, "name": record.name,
            "first_seen": record.first_seen, "last_sync": record.last_sync,
            "gone_at": record.gone_at or None,
            "steps": [asdict(s) for s in (*record.head, *record.tail)], "dropped": record.dropped,
            "dropped_after": len(record.head),
            "probes": [{"container": c, "probe": k, **asdict(p)} for (c, k), p in record.probes.items()],
        }

    def pods(self) -> list[dict[str, Any]]:
        return [{"uid": r.uid, "namespace": r.namespace, "name": r.name, "steps": len(r.head) + len(r.tail),
                 "gone_at": r.gone_at or None} for r in (*self._pods.values(), *self._gone.values())]
