"""Housekeeping (the kubelet's HandlePodCleanups), every 2 s once every pod source has spoken:
terminate the runtime's pods no source wants, restart missing workers, unpublish the CSI volumes
of pods that are gone, and remove the directories, log directories and cgroups of pods nothing
knows any more (a pod removed while the agent was down, or whose cleanup was cut short, leaves
them); a directory only once its pod has no volume left published.

Only once every source delivered its first set, or a restarted agent would kill pods it simply
has not read yet.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable

from pykubelet.pleg.cache import RuntimeCache
from pykubelet.pods.dispatcher import PodDispatcher
from pykubelet.runtime import cgroups, data_dirs
from pykubelet.util.log import get_logger
from pykubelet.volumes import local as local_volumes

log = get_logger(__name__)

HOUSEKEEPING_SECONDS = 2.0  # the kubelet's housekeeping period
ORPHAN_CGROUP_QUIET_SECONDS = 10.0  # see cgroups.orphaned_pod_cgroups


async def housekeeping(dispatcher: PodDispatcher, cache: RuntimeCache, relisted: asyncio.Event,
                       sources_ready: list[asyncio.Event], root_dir: str, kubepods: str = cgroups.KUBEPODS,
                       pod_logs_dir: str | None = None,
                       clean_up_volumes: Callable[[set[str]], Awaitable[set[str]]] | None = None) -> None:
    """clean_up_volumes(known): tears down the volumes of the pods not known; the UIDs of the
    pods still holding one."""
    for event in sources_ready:
        await event.wait()
    while True:
        await relisted.wait()
        runtime_uids = cache.uids()
        dispatcher.housekeeping(runtime_uids, cache.listed or 0)
        known = set(dispatcher.desired) | set(dispatcher.workers) | runtime_uids
        holding = await clean_up_volumes(known) if clean_up_volumes is not None else set()
        for uid in await asyncio.to_thread(local_volumes.remove_orphaned_pod_dirs, root_dir, known | holding):
            log.info("Removed the directory of an orphaned pod", uid=uid)
        if pod_logs_dir is not None:
            for uid in await asyncio.to_thread(data_dirs.remove_orphaned_pod_log_dirs, pod_logs_dir, known):
                log.info("Removed the log directory of an orphaned pod", uid=uid)
        for uid in await asyncio.to_thread(cgroups.orphaned_pod_cgroups, known, ORPHAN_CGROUP_QUIET_SECONDS,
                                           kubepods=kubepods):
            await asyncio.to_thread(cgroups.remove_pod_cgroups, uid, kubepods=kubepods)
            log.info("Removed the cgroup of an orphaned pod", uid=uid)
        await asyncio.sleep(HOUSEKEEPING_SECONDS)
