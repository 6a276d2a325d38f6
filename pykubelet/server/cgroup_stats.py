"""Usage read straight from the kernel where CRI has no answer (containerd 1.6 has no pod-level
stats RPC): the CPU and memory of the node and of each pod cgroup (cgroup v1's cpuacct and
memory hierarchies, or v2's cpu.stat, memory.current and memory.stat), a netns's
/proc/<pid>/net/dev, and filesystem sizes. Every reader returns None (or {}) when the file is
not there."""

from __future__ import annotations

import os
from dataclasses import dataclass

from pykubelet.runtime import cgroups
from pykubelet.runtime.cgroups import CGROUP_ROOT


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _key_values(path: str) -> dict[str, int]:
    """`name value` lines (memory.stat, cpu.stat, /proc/vmstat)."""
    try:
        with open(path) as f:
            return {k: int(v) for k, v in (line.split()[:2] for line in f if line.strip())}
    except (OSError, ValueError):
        return {}


def _meminfo() -> dict[str, int]:
    """/proc/meminfo's sizes ("MemTotal:  16 kB") in bytes."""
    out = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                fields = line.split()
                if len(fields) == 3 and fields[2] == "kB":
                    out[fields[0].rstrip(":")] = int(fields[1]) * 1024
    except (OSError, ValueError):
        pass
    return out


@dataclass
class CgroupUsage:
    cpu_ns: int
    memory_usage: int
    working_set: int
    rss: int
    page_faults: int
    major_page_faults: int


def cgroup_usage(relative: str, root: str = CGROUP_ROOT) -> CgroupUsage | None:
    """CPU time and memory of one cgroup ("" is the root: the whole node). Working set is usage less
    inactive file pages, as the kubelet counts it."""
    if cgroups.is_unified(root):
        return _usage_v2(relative, root)
    cpu = _read_int(os.path.join(root, "cpuacct", relative, "cpuacct.usage"))
    memory_dir = os.path.join(root, "memory", relative)
    usage = _read_int(os.path.join(memory_dir, "memory.usage_in_bytes"))
    if cpu is None or usage is None:
        return None
    stat = _key_values(os.path.join(memory_dir, "memory.stat"))
    inactive = stat.get("total_inactive_file", 0)
    return CgroupUsage(cpu, usage, max(usage - inactive, 0), stat.get("total_rss", 0),
                       stat.get("total_pgfault", 0), stat.get("total_pgmajfault", 0))


def _usage_v2(relative: str, root: str) -> CgroupUsage | None:
    """cgroup v2: cpu.stat's usage_usec, memory.current and memory.stat (non-hierarchical names, but
    a v2 cgroup's files count its whole subtree). The root cgroup has no memory.current: the
    node's memory comes from /proc/meminfo and /proc/vmstat, as cAdvisor takes it."""
    directory = os.path.join(root, relative)
    cpu = _key_values(os.path.join(directory, "cpu.stat")).get("usage_usec")
    if not relative:
        meminfo, vmstat = _meminfo(), _key_values("/proc/vmstat")
        if cpu is None or "MemTotal" not in meminfo:
            return None
        usage = meminfo["MemTotal"] - meminfo.get("MemFree", 0)
        return CgroupUsage(cpu * 1000, usage, max(usage - meminfo.get("Inactive(file)", 0), 0),
                           meminfo.get("AnonPages", 0), vmstat.get("pgfault", 0), vmstat.get("pgmajfault", 0))
    usage = _read_int(os.path.join(directory, "memory.current"))
    if cpu is None or usage is None:
        return None
    stat = _key_values(os.path.join(directory, "memory.stat"))
    return CgroupUsage(cpu * 1000, usage, max(usage - stat.get("inactive_file", 0), 0), stat.get("anon", 0),
                       stat.get("pgfault", 0), stat.get("pgmajfault", 0))


def pod_cgroup(uid: str, root: str = CGROUP_ROOT, kubepods: str = cgroups.KUBEPODS) -> str | None:
    """The pod's cgroup relative to a hierarchy (either driver's layout, under `kubepods`), if it exists."""
    return cgroups.pod_cgroup_relative(uid, root, kubepods)


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
