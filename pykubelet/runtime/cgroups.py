"""The pod cgroups of the kubelet's cgroupfs layout, removed with the pod.

Before the sandbox starts, the pod's cgroup is made in the cpu and memory hierarchies with the
pod-level limits (resources.pod_cgroup_resources). The runtime creates
/kubepods/[burstable/|besteffort/]pod<uid>/<container> under each cgroup v1 hierarchy (and in
the unified one) when it starts the pod's containers there (the sandbox's CgroupParent, see
specs.pod_cgroup_parent); it removes the container cgroups with the containers, and the pod's
own directory is ours to remove.
"""

from __future__ import annotations

import os
import time
from typing import Callable

from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.util.log import get_logger

log = get_logger(__name__)

CGROUP_ROOT = "/sys/fs/cgroup"
KUBEPODS = "kubepods"  # the top of the pods' cgroups (cgroupfs layout)
QOS_TIERS = ("", "burstable", "besteffort")


def kubepods_under(cgroup_root: str) -> str:
    """The pods' cgroup relative to each hierarchy: kubepods, or <cgroupRoot>/kubepods (the
    kubelet's --cgroup-root, which keeps a node's pods apart from another node's on one machine)."""
    return os.path.join(cgroup_root.strip("/"), KUBEPODS) if cgroup_root.strip("/") else KUBEPODS


def pod_cgroup_dirs(uid: str, root: str = CGROUP_ROOT, kubepods: str = KUBEPODS) -> list[str]:
    """Every existing directory of the pod's cgroup, one per hierarchy (v1 and unified)."""
    out = []
    for hierarchy in _hierarchies(root):
        for tier in QOS_TIERS:
            path = os.path.join(hierarchy, kubepods, tier, f"pod{uid}")
            if os.path.isdir(path):
                out.append(path)
    return out


def _hierarchies(root: str) -> list[str]:
    return [root] + [os.path.join(root, h) for h in sorted(os.listdir(root))
                     if os.path.isdir(os.path.join(root, h)) and not os.path.islink(os.path.join(root, h))]


def pod_cgroups(root: str = CGROUP_ROOT, kubepods: str = KUBEPODS) -> dict[str, list[str]]:
    """Every pod cgroup on the machine: pod UID -> its directories (all hierarchies and tiers)."""
    found: dict[str, list[str]] = {}
    for hierarchy in _hierarchies(root):
        for tier in QOS_TIERS:
            parent = os.path.join(hierarchy, kubepods, tier)
            try:
                names = os.listdir(parent)
            except OSError:
                continue
            for name in names:
                if name.startswith("pod") and os.path.isdir(os.path.join(parent, name)):
                    found.setdefault(name.removeprefix("pod"), []).append(os.path.join(parent, name))
    return found


def _holds_processes(path: str) -> bool:
    for dirpath, _, files in os.walk(path):
        if "cgroup.procs" in files:
            try:
                with open(os.path.join(dirpath, "cgroup.procs")) as f:
                    if f.read().strip():
                        return True
            except OSError:
                return True  # cannot tell: leave it
    return False


def orphaned_pod_cgroups(known: set[str], quiet_seconds: float, root: str = CGROUP_ROOT,
                         clock: Callable[[], float] = time.time, kubepods: str = KUBEPODS) -> list[str]:
    """UIDs of pod cgroups that no pod owns: not in `known`, holding no process, and untouched for
    `quiet_seconds` (the kubelet's cleanupOrphanedPodCgroups, with one caution of ours: several
    nodes of a test bed share one cgroup tree, and another node's pod has its cgroup a moment
    before its sandbox starts in it)."""
    orphans = []
    for uid, paths in pod_cgroups(root, kubepods).items():
        if uid in known:
            continue
        try:
            quiet = all(clock() - os.stat(p).st_mtime >= quiet_seconds for p in paths)
        except OSError:
            continue  # going away already
        if quiet and not any(_holds_processes(p) for p in paths):
            orphans.append(uid)
    return orphans


def remove_pod_cgroups(uid: str, root: str = CGROUP_ROOT, kubepods: str = KUBEPODS) -> None:
    """rmdir the pod's cgroups, deepest first (a cgroup directory goes with rmdir, not unlink)."""
    try:
        paths = pod_cgroup_dirs(uid, root, kubepods)
    except OSError:
        return
    for path in paths:
        for dirpath, _, _ in sorted(os.walk(path), key=lambda entry: -len(entry[0])):
            try:
                os.rmdir(dirpath)
            except OSError as e:
                log.warning("Could not remove a pod cgroup", uid=uid, path=dirpath, err=e.strerror)
                break


def _write(path: str, value: int) -> None:
    with open(path, "w") as f:
        f.write(str(value))


def ensure_pod_cgroup(parent: str, resources: api.LinuxContainerResources, root: str = CGROUP_ROOT) -> None:
    """Create the pod's cgroup (parent: /kubepods/...) in the cpu and memory hierarchies with its limits.

    OSError when a hierarchy is missing or refuses a value.
    """
    cpu = os.path.join(root, "cpu", parent.lstrip("/"))
    memory = os.path.join(root, "memory", parent.lstrip("/"))
    for path in (cpu, memory):
        os.makedirs(path, exist_ok=True)
    _write(os.path.join(cpu, "cpu.shares"), resources.cpu_shares)
    if resources.cpu_quota:
        _write(os.path.join(cpu, "cpu.cfs_period_us"), resources.cpu_period)
        _write(os.path.join(cpu, "cpu.cfs_quota_us"), resources.cpu_quota)
    _write(os.path.join(memory, "memory.limit_in_bytes"), resources.memory_limit_in_bytes or -1)
