"""Swap, as the kubelet handles it: refuse to start while swap is on (failSwapOn, the default),
and otherwise tell the runtime how much each container may swap (memorySwap.swapBehavior).

NoSwap (the default): no container swaps. On cgroup v2 that is memory.swap.max 0 in the CRI's
unified map; on cgroup v1 the memory+swap limit equals the memory limit. LimitedSwap (cgroup v2
only): a Burstable container with a memory request below its limit may swap its request's share
of the node's swap (request / node memory x node swap); every other container gets NoSwap.
Nothing is set when the kernel has no swap controller (the runtime would refuse the setting).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from pykubelet.config.node_lifecycle import LIMITED_SWAP, SwapSettings
from pykubelet.cri.v1 import api_pb2 as api

PROC_SWAPS = "/proc/swaps"
SWAP_MAX = "memory.swap.max"  # the cgroup v2 file, a key of LinuxContainerResources.unified
FAIL_SWAP_ON = ("running with swap on is not supported, please disable swap or set --fail-swap-on flag to "
                "false")
LIMITED_SWAP_ON_V1 = "swap feature is enabled and LimitedSwap but it is only supported with cgroupv2"


class SwapError(RuntimeError):
    """The node cannot start as configured (its message is the kubelet's)."""


@dataclass(frozen=True)
class SwapFacts:
    """What the containers' swap settings depend on, read once at start (read_swap_facts)."""

    controller: bool = False
    """The kernel can limit swap per cgroup; False: nothing is configured."""
    unified: bool = True
    """cgroup v2."""
    limited: bool = False
    """memorySwap.swapBehavior is LimitedSwap (and the node on cgroup v2)."""
    memory_capacity: int = 0
    swap_capacity: int = 0
    """Bytes of swap the node has (SwapTotal)."""


def swap_on(proc_swaps: str) -> bool:
    """/proc/swaps lists a device or file below its header line."""
    return len(proc_swaps.strip().split("\n")) > 1


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _own_cgroup_v2(proc_self_cgroup: str) -> str:
    for line in proc_self_cgroup.splitlines():
        if line.startswith("0::"):
            return line[3:].strip()
    return "/"


def controller_available(cgroup_root: str, unified: bool) -> bool:
    """cgroup v2: memory.swap.max in the agent's own cgroup (the root has none); v1: memsw files."""
    if not unified:
        return os.path.exists(os.path.join(cgroup_root, "memory", "memory.memsw.limit_in_bytes"))
    own = _read("/proc/self/cgroup") or ""
    return os.path.exists(os.path.join(cgroup_root, _own_cgroup_v2(own).lstrip("/"), SWAP_MAX))


def read_swap_facts(settings: SwapSettings, cgroup_root: str, unified: bool, memory_capacity: int,
                    swap_capacity: int) -> SwapFacts:
    """Blocking (it reads /proc/swaps and the cgroup files): run it off the event loop. SwapError
    when swap is on and failSwapOn, or LimitedSwap is asked for on cgroup v1."""
    if not unified and settings.swap_behavior == LIMITED_SWAP:
        raise SwapError(LIMITED_SWAP_ON_V1)
    if settings.fail_swap_on and swap_on(_read(PROC_SWAPS) or ""):
        raise SwapError(FAIL_SWAP_ON)
    return SwapFacts(controller=controller_available(cgroup_root, unified), unified=unified,
                     limited=settings.swap_behavior == LIMITED_SWAP, memory_capacity=memory_capacity,
                     swap_capacity=swap_capacity)


def limited_swap_bytes(facts: SwapFacts, memory_request: int) -> int | None:
    """The container's share of the node's swap; None when it cannot be computed (NoSwap then)."""
    if facts.memory_capacity <= 0 or memory_request > facts.memory_capacity:
        return None
    return int(memory_request / facts.memory_capacity * facts.swap_capacity)


def configure(resources: api.LinuxContainerResources, facts: SwapFacts, may_swap: bool, memory_request: int) -> None:
    """Set the container's swap limit in its CRI resources. `may_swap`: the pod and container
    qualify for LimitedSwap (Burstable, not critical, a memory request below its limit)."""
    if not facts.controller:
        return
    if not facts.unified:
        # memory+swap = memory: no swap beyond the limit (ignored by the kernel without a limit)
        resources.memory_swap_limit_in_bytes = resources.memory_limit_in_bytes
        return
    swap = limited_swap_bytes(facts, memory_request) if facts.limited and may_swap else None
    resources.unified[SWAP_MAX] = str(swap or 0)
