"""The eviction manager, connected: it reads the same Summary API snapshot /stats/summary
serves, reclaims disk through the image garbage collector, and evicts through the pod path."""

from __future__ import annotations

import os
from typing import Callable

from pykubelet.config import Settings
from pykubelet.cri.client import CRIClient
from pykubelet.kube.events import WARNING, EventRecorder, node_ref
from pykubelet.node.eviction import EvictionManager, PodPathCalls
from pykubelet.pods.dispatcher import PodDispatcher
from pykubelet.runtime.image_gc import ImageGC
from pykubelet.server.host import Host
from pykubelet.server.stats import IMAGEFS_DIR, SummaryProvider
from pykubelet.status.manager import StatusManager


def dedicated_image_fs(root_dir: str) -> bool:
    """Images on a filesystem other than the root dir's (blocking: it stats both); False when
    either cannot be looked at, the common single-filesystem layout."""
    try:
        return os.stat(root_dir).st_dev != os.stat(IMAGEFS_DIR).st_dev
    except OSError:
        return False


def build_eviction(s: Settings, cri: CRIClient, node_ip: str, recorder: EventRecorder, image_gc: ImageGC | None,
                   dispatcher: Callable[[], PodDispatcher], statuses: Callable[[], StatusManager],
                   on_change: Callable[[], None]) -> EvictionManager | None:
    """None when no threshold is set. `dispatcher` and `statuses` are asked for when the manager
    first runs (the pod path is made after it: the pod path's admission asks it for the conditions).
    Without the periodic image GC (its settings disable it) a collector of its own still reclaims."""
    thresholds = s.eviction_thresholds()
    if not thresholds:
        return None
    summaries = SummaryProvider(Host(s, cri, [node_ip], lambda: statuses().pods()))
    reclaimer = image_gc or ImageGC(cri, s.image_gc, lambda reason, message: recorder.record(
        node_ref(s.node_name), WARNING, reason, message))
    calls = PodPathCalls(active_pods=lambda: dispatcher().active_pods(),
                         evict=lambda *order: dispatcher().evict(*order),
                         eviction_done=lambda uid: dispatcher().eviction_done(uid))
    return EvictionManager(thresholds, summaries.summary, calls, recorder, s.node_name,
                           reclaim_disk=reclaimer.delete_unused_images,
                           dedicated_image_fs=lambda: dedicated_image_fs(s.root_dir),
                           transition_period=s.cluster.eviction_pressure_transition_period,
                           max_pod_grace_seconds=s.cluster.eviction_max_pod_grace_period, on_change=on_change)
