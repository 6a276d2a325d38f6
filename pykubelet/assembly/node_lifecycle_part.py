"""The node's own life, connected: the swap check at start (runtime/swap.py) and the graceful
node shutdown manager (node/shutdown.py), which kills pods through the pod path."""

from __future__ import annotations

import asyncio
from typing import Callable

from pykubelet.config import Settings
from pykubelet.kube.events import EventRecorder
from pykubelet.node import shutdown_state
from pykubelet.node.hostinfo import meminfo_bytes
from pykubelet.node.logind import SystemLogind
from pykubelet.node.shutdown import NodeShutdownManager, PodKiller
from pykubelet.node.shutdown_plan import grace_periods
from pykubelet.pods.dispatcher import PodDispatcher
from pykubelet.runtime import cgroups
from pykubelet.runtime.swap import SwapError, SwapFacts, read_swap_facts
from pykubelet.status.manager import StatusManager
from pykubelet.util.log import get_logger
from pykubelet.util.tasks import LoopDied

log = get_logger(__name__)


async def node_swap(s: Settings, memory_capacity: int, cgroup_root: str = cgroups.CGROUP_ROOT) -> SwapFacts:
    """The node's swap facts; the agent does not start (LoopDied, the kubelet's message) when swap
    is on and failSwapOn, or LimitedSwap is asked for on cgroup v1."""
    def read() -> SwapFacts:
        return read_swap_facts(s.swap, cgroup_root, cgroups.is_unified(cgroup_root), memory_capacity,
                               meminfo_bytes("SwapTotal"))
    try:
        facts = await asyncio.to_thread(read)
    except SwapError as e:
        raise LoopDied(f"failed to run Kubelet: {e}") from None
    if not s.swap.fail_swap_on and not s.swap.swap_behavior:
        log.info("NoSwap is set due to memorySwapBehavior not specified", memorySwapBehavior="", FailSwapOn=False)
    return facts


def build_shutdown(s: Settings, recorder: EventRecorder, dispatcher: Callable[[], PodDispatcher],
                   statuses: Callable[[], StatusManager], on_change: Callable[[], None]) -> NodeShutdownManager | None:
    """None when graceful shutdown is off (no grace period set). `dispatcher` and `statuses` are
    asked for when a shutdown comes (the pod path is made after this)."""
    periods = grace_periods(s.shutdown)
    if not periods:
        return None
    log.info("Creating node shutdown manager", shutdownGracePeriodRequested=s.shutdown.grace_period,
             shutdownGracePeriodCriticalPods=s.shutdown.grace_period_critical_pods,
             shutdownGracePeriodByPodPriority=",".join(f"{p.priority}:{p.seconds}s" for p in periods))
    killer = PodKiller(active_pods=lambda: dispatcher().active_pods(),
                       kill=lambda *order: dispatcher().evict(*order),
                       killed=lambda uid: dispatcher().eviction_done(uid),
                       reported=lambda uid: statuses().reported(uid),
                       retry_reports=lambda: statuses().retry_now())
    return NodeShutdownManager(periods, SystemLogind(), killer, recorder, s.node_name, on_change,
                               state_file=shutdown_state.path_in(s.root_dir))
