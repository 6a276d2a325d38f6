"""Resource pressure against hard eviction thresholds (evictionHard), as the kubelet observes it."""

from __future__ import annotations

import os
from dataclasses import dataclass

from pykubelet.api.eviction import Threshold
from pykubelet.node.hostinfo import meminfo_bytes


@dataclass(frozen=True)
class Pressure:
    memory: bool = False
    disk: bool = False
    pid: bool = False


def _fs(path: str) -> tuple[int, int, int, int]:
    try:
        st = os.statvfs(path)
    except OSError:
        return 1, 1, 1, 1
    return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize, st.f_favail, max(st.f_files, 1)


def _pids() -> tuple[int, int]:
    pid_max = int(open("/proc/sys/kernel/pid_max").read())
    running = sum(1 for name in os.listdir("/proc") if name.isdigit())
    return pid_max - running, pid_max


def observe(thresholds: dict[str, Threshold], nodefs_path: str, imagefs_path: str) -> Pressure:
    """Which pressure conditions hold right now."""
    def crossed(signal: str, available: int, capacity: int) -> bool:
        threshold = thresholds.get(signal)
        return threshold is not None and threshold.crossed(available, capacity)

    memory = crossed("memory.available", meminfo_bytes("MemAvailable"), meminfo_bytes("MemTotal"))
    node_free, node_size, node_inodes, node_inodes_total = _fs(nodefs_path)
    image_free, image_size, image_inodes, image_inodes_total = _fs(imagefs_path)
    disk = (crossed("nodefs.available", node_free, node_size)
            or crossed("nodefs.inodesFree", node_inodes, node_inodes_total)
            or crossed("imagefs.available", image_free, image_size)
            or crossed("imagefs.inodesFree", image_inodes, image_inodes_total))
    pid = "pid.available" in thresholds and crossed("pid.available", *_pids())
    return Pressure(memory=memory, disk=disk, pid=pid)
