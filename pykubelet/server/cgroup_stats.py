"""Usage read straight from the kernel where CRI has no answer (containerd 1.6 has no pod-level
stats RPC): cgroup v1 cpuacct/memory of the node and of each pod cgroup, a netns's /proc/<pid>/net/dev,
and filesystem sizes. Every reader returns None (or {}) when the file is not there."""

from __future__ import annotations

import os
from dataclasses import dataclass

from pykubelet.runtime.cgroups import CGROUP_ROOT, KUBEPODS, QOS_TIERS


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _memory_stat(directory: str) -> dict[str, int]:
    try:
        with open(os.path.join(directory, "memory.stat")) as f:
            return {k: int(v) for k, v in (line.split() for line in f if line.strip())}
    except (OSError, ValueError):
        return {}


@dataclass
class CgroupUsage:
    cpu_ns: int
    memory_usage: int
    working_set: int
    rss: int
    page_faults: int
    major_page_faults: int


def cgroup_usage(relative: str, root: str = CGROUP_ROOT) -> CgroupUsage | None:
    """cpuacct + memory of one cgroup ("" is the root: the whole node). Working set is usage less
    inactive file pages, as the kubelet counts it."""
    cpu = _read_int(os.path.join(root, "cpuacct", relative, "cpuacct.usage"))
    memory_dir = os.path.join(root, "memory", relative)
    usage = _read_int(os.path.join(memory_dir, "memory.usage_in_bytes"))
    if cpu is None or usage is None:
        return None
    stat = _memory_stat(memory_dir)
    inactive = stat.get("total_inactive_file", 0)
    return CgroupUsage(cpu, usage, max(usage - inactive, 0), stat.get("total_rss", 0),
                       stat.get("total_pgfault", 0), stat.get("total_pgmajfault", 0))


def pod_cgroup(uid: str, root: str = CGROUP_ROOT, kubepods: str = KUBEPODS) -> str | None:
    """The pod's cgroup relative to a hierarchy (kubepods/[tier/]pod<uid>), if it exists."""
    for tier in QOS_TIERS:
        relative = os.path.join(kubepods, tier, f"pod{uid}")
        if os.path.isdir(os.path.join(root, "memory", relative)):
            return relative
    return None


def net_dev(pid: int | None) -> dict[str, tuple[int, int, int, int]]:
    """interface -> (rxBytes, rxErrors, txBytes, txErrors) in the network namespace of `pid`
    (None: this process's), loopback left out as the kubelet does."""
    path = f"/proc/{pid}/net/dev" if pid else "/proc/net/dev"
    out = {}
    try:
        with open(path) as f:
            for line in f.readlines()[2:]:
                name, _, rest = line.partition(":")
                fields = rest.split()
                if name.strip() != "lo" and len(fields) >= 11:
                    out[name.strip()] = (int(fields[0]), int(fields[2]), int(fields[8]), int(fields[10]))
    except (OSError, ValueError):
        pass
    return out


def fs_stats(path: str) -> dict[str, int]:
    try:
        st = os.statvfs(path)
    except OSError:
        return {}
    capacity, available = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
    return {"availableBytes": available, "capacityBytes": capacity,
            "usedBytes": (st.f_blocks - st.f_bfree) * st.f_frsize, "inodesFree": st.f_ffree,
            "inodes": st.f_files, "inodesUsed": st.f_files - st.f_ffree}


def dir_usage(path: str) -> tuple[int, int]:
    """(bytes, inodes) of the files under path; a small walk (log dirs, volumes)."""
    total = inodes = 0
    for dirpath, dirnames, filenames in os.walk(path):
        inodes += len(dirnames) + len(filenames)
        for name in filenames:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            except OSError:
                pass
    return total, inodes


def memory_capacity() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def boot_time() -> float:
    try:
        with open("/proc/stat") as f:
            for line in f:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0.0


def process_count() -> int:
    return sum(1 for entry in os.scandir("/proc") if entry.name.isdigit())


def max_pid() -> int:
    return _read_int("/proc/sys/kernel/pid_max") or 0
