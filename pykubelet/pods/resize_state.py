"""In-place pod resize, the remembering part: each pod's allocated and actuated resources,
checkpointed under the root directory (allocated_pods_state, actuated_pods_state, as the
kubelet names them) so a restarted agent neither re-admits nor re-applies a resize, and the
PodResizePending / PodResizeInProgress conditions (kept in memory, as the kubelet's status
manager keeps them: a restarted agent decides them again on the pod's first sync).

The decisions are pods/resize.py's; this module only keeps their results. Only pod workers
call it, each for its own pod, so one pod's entries never race; the files are written whole,
atomically and durably (util/durable.py), in a thread, one write at a time.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass

from pykubelet.api.pod import Pod
from pykubelet.api.pod_status import PodCondition
from pykubelet.api.times import rfc3339
from pykubelet.pods import resize
from pykubelet.pods.admission import Allocatable
from pykubelet.util import durable
from pykubelet.util.log import get_logger

log = get_logger(__name__)

ALLOCATED_FILE, ACTUATED_FILE = "allocated_pods_state", "actuated_pods_state"


@dataclass
class ResizeConditions:
    """(reason, message, observedGeneration) of each condition the pod has, None if it has not."""

    pending: tuple[str, str, int] | None = None
    in_progress: tuple[str, str, int] | None = None


def _read(path: str) -> dict[str, resize.PodAllocation]:
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        log.error("Ignoring an unreadable resource checkpoint", path=path, err=str(e))
        return {}
    if not isinstance(data, dict):
        log.error("Ignoring a resource checkpoint that is not an object", path=path)
        return {}
    out: dict[str, resize.PodAllocation] = {}
    for uid, containers in data.items():
        if isinstance(containers, dict) and all(_valid(a) for a in containers.values()):
            out[uid] = containers
        else:  # that pod is taken as admitted with its spec's resources again
            log.error("Ignoring a malformed entry of a resource checkpoint", path=path, uid=uid)
    return out


def _valid(amounts: object) -> bool:
    if not isinstance(amounts, dict) or not all(isinstance(amounts.get(k, {}), dict) for k in ("requests", "limits")):
        return False
    try:
        resize.numeric(amounts)
    except (TypeError, ValueError):
        return False
    return all(isinstance(v, str) for kind in amounts.values() if isinstance(kind, dict) for v in kind.values())


def _write(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), mode=0o750, exist_ok=True)
    durable.write_file(path, data, 0o600)


class ResizeState:
    def __init__(self, root_dir: str, allocatable: Allocatable):
        self.root_dir = root_dir
        self.allocatable = allocatable
        self.allocated: dict[str, resize.PodAllocation] = {}
        self.actuated: dict[str, resize.PodAllocation] = {}
        self.conditions: dict[str, ResizeConditions] = {}
        self.pods: dict[str, Pod] = {}
        """Each syncing pod with its allocated resources: what a resize is admitted next to."""
        self._loaded = False
        self._load_lock = asyncio.Lock()
        self._write_lock = asyncio.Lock()

    async def load(self) -> None:
        # Once: the pods an agent finds at start all allocate at once, and a second read that
        # finished after the first pod had allocated would drop that pod's allocation.
        async with self._load_lock:
            if not self._loaded:
                self.allocated = await asyncio.to_thread(_read, os.path.join(self.root_dir, ALLOCATED_FILE))
                self.actuated = await asyncio.to_thread(_read, os.path.join(self.root_dir, ACTUATED_FILE))
                self._loaded = True

    async def _save(self, name: str, table: dict[str, resize.PodAllocation]) -> None:
        path = os.path.join(self.root_dir, name)
        async with self._write_lock:
            data = json.dumps(table, sort_keys=True).encode()
            try:
                await asyncio.to_thread(_write, path, data)
            except OSError as e:  # kept in memory meanwhile; the next change writes it all again
                log.error("Could not write a resource checkpoint", path=path, err=str(e))

    async def allocate(self, pod: Pod) -> tuple[Pod, list[tuple[str, str, str]]]:
        """The pod with its allocated resources, after admitting a pending resize if it fits
        next to the other syncing pods' allocations (the kubelet's handlePodResourcesResize);
        and the Events to record, as (type, reason, message)."""
        allocated_pod, events = await self._allocate(pod)
        self.pods[pod.uid] = allocated_pod
        return allocated_pod, events

    async def _allocate(self, pod: Pod) -> tuple[Pod, list[tuple[str, str, str]]]:
        await self.load()
        uid, desired = pod.uid, resize.allocation_of(pod)
        events: list[tuple[str, str, str]] = []
        if uid not in self.allocated:  # admitted just now, or before the agent kept allocations
            self.allocated[uid] = desired
            await self._save(ALLOCATED_FILE, self.allocated)
        allocated = self.allocated[uid]
        conditions = self.conditions.setdefault(uid, ResizeConditions())
        if all(resize.numeric(desired.get(n, {})) == resize.numeric(a) for n, a in allocated.items()):
            conditions.pending = None
            return resize.with_allocation(pod, allocated), events
        generation = pod.generation
        others = [p for other, p in self.pods.items() if other != uid]
        pending = resize.admit_resize(pod, others, self.allocatable)
        if pending is None:
            self.allocated[uid] = desired
            await self._save(ALLOCATED_FILE, self.allocated)
            conditions.pending = None
            conditions.in_progress = ("", "", generation)
            events.append(("Normal", "ResizeStarted", resize.event_message("Pod resize started", pod, generation)))
            return resize.with_allocation(pod, desired), events
        if conditions.pending is None or conditions.pending[0] != pending.reason or conditions.pending[2] != generation:
            kind = "ResizeInfeasible" if pending.reason == resize.INFEASIBLE else "ResizeDeferred"
            events.append(("Warning", kind, resize.event_message(f"Pod resize {pending.reason}", pod, generation,
                                                                 pending.message)))
        conditions.pending = (pending.reason, pending.message, generation)
        return resize.with_allocation(pod, allocated), events

    def actuated_of(self, uid: str) -> resize.PodAllocation:
        return self.actuated.get(uid, {})

    async def set_actuated(self, pod: Pod, names: list[str]) -> None:
        """Record `pod`'s (allocated) resources as applied to these containers."""
        if not names:
            return
        await self.load()
        entry = self.actuated.setdefault(pod.uid, {})
        by_name = {c.name: c for c in resize.resizable_containers(pod)}
        for name in names:
            if name in by_name:
                entry[name] = resize.container_amounts(by_name[name])
        await self._save(ACTUATED_FILE, self.actuated)

    async def set_actuated_amounts(self, uid: str, name: str, amounts: resize.Amounts) -> None:
        """Record what one container's cgroup was just set to."""
        await self.load()
        self.actuated.setdefault(uid, {})[name] = amounts
        await self._save(ACTUATED_FILE, self.actuated)

    def resize_error(self, uid: str, message: str, generation: int) -> None:
        conditions = self.conditions.setdefault(uid, ResizeConditions())
        kept = conditions.in_progress[2] if conditions.in_progress else generation
        conditions.in_progress = (resize.ERROR, message, kept)

    def finished(self, uid: str) -> bool:
        """Clear PodResizeInProgress; True if it was set (the resize just completed)."""
        conditions = self.conditions.get(uid)
        if conditions is None or conditions.in_progress is None:
            return False
        conditions.in_progress = None
        return True

    def in_progress(self, uid: str, generation: int) -> None:
        conditions = self.conditions.setdefault(uid, ResizeConditions())
        if conditions.in_progress is None:
            conditions.in_progress = ("", "", generation)

    def pod_conditions(self, uid: str, now: float) -> list[PodCondition]:
        conditions = self.conditions.get(uid) or ResizeConditions()
        out = []
        for kind, value in ((resize.PENDING_CONDITION, conditions.pending),
                            (resize.IN_PROGRESS_CONDITION, conditions.in_progress)):
            if value is not None:
                out.append(PodCondition(kind, True, rfc3339(now) or "", value[0], value[1],
                                        observed_generation=value[2]))
        return out

    async def remove(self, uid: str) -> None:
        """Forget a pod that is gone (its worker removed what was left of it)."""
        self.conditions.pop(uid, None)
        self.pods.pop(uid, None)
        await self.load()
        for name, table in ((ALLOCATED_FILE, self.allocated), (ACTUATED_FILE, self.actuated)):
            if table.pop(uid, None) is not None:
                await self._save(name, table)
