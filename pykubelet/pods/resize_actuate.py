"""In-place pod resize, the acting part (the kubelet's doPodResizeAction): the pod cgroup and
each running container's cgroup set to the allocated resources, in the kubelet's order.

Memory first, then CPU. For each: a pod limit (or CPU weight) that grows is raised before the
containers, one that shrinks is lowered after them, so a container never asks for more than its
pod cgroup allows; the containers get CRI UpdateContainerResources, decreases first, each with
the other resource held at what it last got. A memory limit is never set at or below what the
pod or container uses now: the resize then fails (PodResizeInProgress, reason Error) and is
tried again on later syncs, as with the kubelet. What was applied is recorded at once
(pods/resize_state.py), so a failure halfway leaves an exact record to continue from.
"""

from __future__ import annotations

import asyncio
import copy

from pykubelet.api.pod import Pod
from pykubelet.cri import errors
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.pods import resize
from pykubelet.pods.resize_state import ResizeState
from pykubelet.runtime import cgroups, labels, resources, specs
from pykubelet.runtime.service import Runtime
from pykubelet.runtime.specs import NodeFacts
from pykubelet.util.log import get_logger

log = get_logger(__name__)


class ResizeError(Exception):
    """Why a resize could not be applied (the PodResizeInProgress Error message)."""


def _amounts(cpu: resize.Numeric, memory: resize.Numeric) -> resize.Amounts:
    """CPU as `cpu` has it, memory as `memory` has it."""
    requests, limits = {}, {}
    if cpu.cpu_request:
        requests["cpu"] = resize.millicores(cpu.cpu_request)
    if cpu.cpu_limit:
        limits["cpu"] = resize.millicores(cpu.cpu_limit)
    if memory.memory_request:
        requests["memory"] = resize.binary_bytes(memory.memory_request)
    if memory.memory_limit:
        limits["memory"] = resize.binary_bytes(memory.memory_limit)
    return {"requests": requests, "limits": limits}


def _limit_grows(new: int, old: int) -> bool:
    return bool(new) and old != 0 and new > old  # 0: no limit, more than any


def _stepped(applied: api.LinuxContainerResources, target: api.LinuxContainerResources, resource: str,
             growing_only: bool) -> api.LinuxContainerResources:
    """`applied` with `resource` moved to `target`'s values (only those that grow, or all).
    A limit the target does not set stays as it is: removing a pod limit is not supported."""
    out = copy.deepcopy(applied)
    if resource == "memory":
        if target.memory_limit_in_bytes and (not growing_only or _limit_grows(target.memory_limit_in_bytes,
                                                                              applied.memory_limit_in_bytes)):
            out.memory_limit_in_bytes = target.memory_limit_in_bytes
        return out
    if not growing_only or target.cpu_shares > applied.cpu_shares:
        out.cpu_shares = target.cpu_shares
    if target.cpu_quota and (not growing_only or _limit_grows(target.cpu_quota, applied.cpu_quota)):
        out.cpu_quota, out.cpu_period = target.cpu_quota, target.cpu_period
    return out


class ResizeActuator:
    def __init__(self, cri: Runtime, node: NodeFacts, state: ResizeState):
        self.cri = cri
        self.node = node
        self.state = state

    async def resize(self, pod: Pod, plan: resize.ResizePlan) -> None:
        """Apply `plan` to `pod` (with its allocated resources); ResizeError says what failed."""
        actuated = self.state.actuated_of(pod.uid)
        current_pod = resize.with_allocation(pod, actuated)
        applied, target = resources.pod_cgroup_resources(current_pod), resources.pod_cgroup_resources(pod)
        await self._check_memory(pod, plan, applied, target)
        parent = specs.pod_cgroup_parent(pod, self.node.cgroup_driver, self.node.kubepods)
        # Each container's amounts as last applied: the CPU step holds memory where the memory
        # step just put it.
        now = {u.name: u.current for updates in plan.updates.values() for u in updates}
        for resource in ("memory", "cpu"):
            updates = plan.updates[resource]
            if not updates:
                continue
            grown = _stepped(applied, target, resource, growing_only=True)
            if grown != applied:
                applied = await self._set_pod_cgroup(parent, grown)
            for update in updates:
                now[update.name] = await self._update_container(pod, resource, update, now[update.name])
            shrunk = _stepped(applied, target, resource, growing_only=False)
            if shrunk != applied:
                applied = await self._set_pod_cgroup(parent, shrunk)

    async def _set_pod_cgroup(self, parent: str, wanted: api.LinuxContainerResources) -> api.LinuxContainerResources:
        try:
            await asyncio.to_thread(cgroups.ensure_pod_cgroup, parent, wanted, self.node.cgroup_root)
        except OSError as e:
            raise ResizeError(f"failed to set the pod cgroup {parent}: {e}") from e
        return wanted

    async def _update_container(self, pod: Pod, resource: str, update: resize.ContainerUpdate,
                                current: resize.Numeric) -> resize.Numeric:
        """Returns the container's amounts as now applied."""
        # The resource being resized goes to its new value; the other stays at what it last got.
        cpu, memory = (current, update.desired) if resource == "memory" else (update.desired, current)
        amounts = _amounts(cpu, memory)
        container = next(c for c in resize.resizable_containers(pod) if c.name == update.name)
        moved = resize.with_allocation(pod, {update.name: amounts})
        moved_container = next(c for c in resize.resizable_containers(moved) if c.name == update.name)
        linux = resources.linux_resources(moved, moved_container, self.node.memory_capacity, self.node.swap)
        try:
            await self.cri.update_container_resources(update.container_id, linux)
        except errors.CRIError as e:
            raise ResizeError(f"failed to update resources of container {container.name}: {e.details}") from e
        await self.state.set_actuated_amounts(pod.uid, update.name, amounts)
        log.info("Resized container in place", pod=pod.full_name, container=update.name, resource=resource)
        return resize.numeric(amounts)

    async def _check_memory(self, pod: Pod, plan: resize.ResizePlan, applied: api.LinuxContainerResources,
                            target: api.LinuxContainerResources) -> None:
        """The kubelet's best-effort check before any change: no memory limit added or lowered
        to at or below current usage."""
        lowered = {u.name: u.desired.memory_limit for u in plan.updates["memory"] if u.desired.memory_limit and (
            not u.current.memory_limit or u.desired.memory_limit < u.current.memory_limit)}
        pod_lowered = bool(target.memory_limit_in_bytes) and (
            not applied.memory_limit_in_bytes or target.memory_limit_in_bytes < applied.memory_limit_in_bytes)
        if not lowered and not pod_lowered:
            return
        problems = []
        if pod_lowered:
            usage = await asyncio.to_thread(cgroups.pod_memory_usage, pod.uid, self.node.cgroup_root,
                                            self.node.kubepods)
            if usage is None:
                problems.append("missing pod memory usage")
            elif usage >= target.memory_limit_in_bytes:
                problems.append(f"attempting to set pod memory limit ({target.memory_limit_in_bytes}) "
                                f"below current usage ({usage})")
        if lowered:
            try:
                stats = await self.cri.list_container_stats({labels.POD_UID: pod.uid})
            except errors.CRIError as e:
                raise ResizeError(f"unable to read memory usage for pod {pod.full_name}: {e.details}") from e
            usage_of = {s.attributes.metadata.name: s.memory.usage_bytes.value for s in stats
                        if s.HasField("memory") and s.memory.HasField("usage_bytes")}
            for name, limit in lowered.items():
                if name not in usage_of:
                    problems.append(f'missing container "{name}" memory usage')
                elif usage_of[name] >= limit:
                    problems.append(f'attempting to set container "{name}" memory limit ({limit}) '
                                    f"below current usage ({usage_of[name]})")
        if problems:
            # Go's aggregate error: one alone as itself, several in brackets.
            joined = problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]"
            raise ResizeError(f"cannot decrease memory limits: {joined}")
