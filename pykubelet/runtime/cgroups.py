"""The pods' cgroups: where they are under either cgroup driver and cgroup version, made with
the pod-level limits before the sandbox starts, and removed with the pod.

The two layouts, as the kubelet names them:

    cgroupfs   kubepods/[burstable/|besteffort/]pod<uid>
    systemd    kubepods.slice/[kubepods-burstable.slice/]kubepods[-burstable]-pod<uid, - as _>.slice

A cgroupRoot (--cgroup-root, a cgroupfs path such as /pkl-a) goes in front under either driver,
as the kubelet does it: pkl-a/kubepods/..., or pkl_a.slice/pkl_a-kubepods.slice/... (kubepods_under
gives the path; its parts are the slice names' parts). Every function here takes that `kubepods`.

The sandbox's CgroupParent is the cgroupfs path (/kubepods/...) or the pod slice's name; the
runtime makes each container's cgroup below it (runc with the same driver) and removes it with
the container. The pod's own cgroup is ours: a cgroupfs directory is made and removed here
(cgroup_limits.py writes its files), a slice through systemd (systemd_units.py), which owns
every cgroup of its tree. On cgroup v1 the layout repeats under each controller's hierarchy; on
v2 there is one tree. Finding a pod's cgroups ignores the driver: a node that changed drivers,
or a leak check, sees both layouts.
"""

from __future__ import annotations

import os
import time
from typing import Callable

from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.runtime import cgroup_limits, systemd_units
from pykubelet.util.log import get_logger

log = get_logger(__name__)

CGROUP_ROOT = "/sys/fs/cgroup"
KUBEPODS = "kubepods"  # the top of the pods' cgroups
QOS_TIERS = ("", "burstable", "besteffort")  # Guaranteed pods sit at the top
CGROUPFS, SYSTEMD = "cgroupfs", "systemd"
SLICE = ".slice"


def is_unified(root: str = CGROUP_ROOT) -> bool:
    """cgroup v2: one tree with its controllers listed at the top."""
    return os.path.isfile(os.path.join(root, "cgroup.controllers"))


def kubepods_under(cgroup_root: str) -> str:
    """The pods' cgroup as a cgroupfs path inside each hierarchy: kubepods, or <cgroupRoot>/kubepods
    (the kubelet's --cgroup-root, which keeps a node's pods apart from another node's on one
    machine). Its parts are the cgroup's name under either driver: the systemd driver joins them
    into slice names (/pkl-a -> pkl_a-kubepods.slice inside pkl_a.slice)."""
    return os.path.join(cgroup_root.strip("/"), KUBEPODS) if cgroup_root.strip("/") else KUBEPODS


def qos_tier(qos_class: str) -> str:
    """The QoS tier's name in the layout: none for Guaranteed, else the class in lower case."""
    return "" if qos_class == "Guaranteed" else qos_class.lower()


def slice_name(*parts: str) -> str:
    """systemd's unit name for a cgroup path: the parts joined by '-', a '-' inside a part as '_'."""
    return "-".join(p.replace("-", "_") for p in parts if p) + SLICE


def slice_path(name: str) -> str:
    """Where systemd puts a slice: under each of its prefixes (a-b-c.slice is in a.slice/a-b.slice/)."""
    parts = name.removesuffix(SLICE).split("-")
    return "/".join("-".join(parts[:i]) + SLICE for i in range(1, len(parts) + 1))


def pod_cgroup_parent(uid: str, qos_class: str, driver: str = CGROUPFS, kubepods: str = KUBEPODS) -> str:
    """The sandbox's CgroupParent: /kubepods/burstable/pod<uid>, or kubepods-burstable-pod<uid>.slice;
    under a cgroupRoot (kubepods_under) /<root>/kubepods/..., or <root>-kubepods-....slice."""
    parts = (*kubepods.split("/"), qos_tier(qos_class), f"pod{uid}")
    if driver == SYSTEMD:
        return slice_name(*parts)
    return "/" + "/".join(p for p in parts if p)


def relative_path(parent: str) -> str:
    """A CgroupParent as a directory inside a hierarchy."""
    return slice_path(parent) if parent.endswith(SLICE) else parent.strip("/")


def _candidates(uid: str, kubepods: str = KUBEPODS) -> list[str]:
    """Every place the pod's cgroup can be inside one hierarchy, both drivers and every tier."""
    return [relative_path(pod_cgroup_parent(uid, tier or "Guaranteed", driver, kubepods))
            for driver in (CGROUPFS, SYSTEMD) for tier in QOS_TIERS]


def hierarchies(root: str = CGROUP_ROOT) -> list[str]:
    """The root itself (v2, or v1's tmpfs) and, on v1, each controller's (and the named) hierarchy."""
    if is_unified(root):
        return [root]
    return [root] + [os.path.join(root, h) for h in sorted(os.listdir(root))
                     if os.path.isdir(os.path.join(root, h)) and not os.path.islink(os.path.join(root, h))]


def pod_cgroup_dirs(uid: str, root: str = CGROUP_ROOT, kubepods: str = KUBEPODS) -> list[str]:
    """Every existing directory of the pod's cgroup, one per hierarchy."""
    return [path for hierarchy in hierarchies(root) for relative in _candidates(uid, kubepods)
            if os.path.isdir(path := os.path.join(hierarchy, relative))]


def pod_cgroup_relative(uid: str, root: str = CGROUP_ROOT, kubepods: str = KUBEPODS) -> str | None:
    """The pod's cgroup inside the hierarchy that accounts memory (v1's memory, v2's one tree), if any."""
    hierarchy = root if is_unified(root) else os.path.join(root, "memory")
    return next((r for r in _candidates(uid, kubepods) if os.path.isdir(os.path.join(hierarchy, r))), None)


def pod_memory_usage(uid: str, root: str = CGROUP_ROOT, kubepods: str = KUBEPODS) -> int | None:
    """The bytes the pod's cgroup uses now (v1 memory.usage_in_bytes, v2 memory.current), if known."""
    relative = pod_cgroup_relative(uid, root, kubepods)
    if relative is None:
        return None
    unified = is_unified(root)
    hierarchy = root if unified else os.path.join(root, "memory")
    try:
        with open(os.path.join(hierarchy, relative, "memory.current" if unified else "memory.usage_in_bytes")) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _pod_uid(name: str) -> str | None:
    """The UID in a pod cgroup's directory name, either layout."""
    if name.startswith("pod") and not name.endswith(SLICE):
        return name[3:]
    if name.endswith(SLICE) and "-pod" in name:  # a '-' inside a name part is '_': only ours match
        return name.removesuffix(SLICE).rsplit("-pod", 1)[1].replace("_", "-")
    return None


def pod_cgroups(root: str = CGROUP_ROOT, kubepods: str = KUBEPODS) -> dict[str, list[str]]:
    """Every pod cgroup under `kubepods`: pod UID -> its directories (all hierarchies, tiers, drivers)."""
    tiers = {os.path.dirname(relative_path(pod_cgroup_parent("x", tier or "Guaranteed", driver, kubepods)))
             for driver in (CGROUPFS, SYSTEMD) for tier in QOS_TIERS}
    found: dict[str, list[str]] = {}
    for hierarchy in hierarchies(root):
        for tier in sorted(tiers):
            parent = os.path.join(hierarchy, tier)
            try:
                names = os.listdir(parent)
            except OSError:
                continue
            for name in names:
                uid = _pod_uid(name)
                if uid and os.path.isdir(os.path.join(parent, name)):
                    found.setdefault(uid, []).append(os.path.join(parent, name))
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
    """Remove the pod's cgroups: a slice is stopped through systemd when systemd runs this tree
    (it would keep a unit for a directory removed behind its back); a plain directory goes with
    rmdir, deepest first (a cgroup directory goes with rmdir, not unlink)."""
    try:
        paths = pod_cgroup_dirs(uid, root, kubepods)
    except OSError:
        return
    slices = {os.path.basename(p) for p in paths if p.endswith(SLICE)}
    if slices and root == CGROUP_ROOT and systemd_units.running():
        for name in sorted(slices):
            try:
                systemd_units.stop_unit(name)
            except systemd_units.SystemdError as e:
                log.warning("Could not stop a pod slice", uid=uid, unit=name, err=str(e))
        systemd_units.wait_until(lambda: not pod_cgroup_dirs(uid, root, kubepods), systemd_units.JOB_SECONDS)
        return
    for path in paths:
        for dirpath, _, _ in sorted(os.walk(path), key=lambda entry: -len(entry[0])):
            try:
                os.rmdir(dirpath)
            except OSError as e:
                log.warning("Could not remove a pod cgroup", uid=uid, path=dirpath, err=e.strerror)
                break


def ensure_pod_cgroup(parent: str, resources: api.LinuxContainerResources, root: str = CGROUP_ROOT) -> None:
    """Make the pod's cgroup (a CgroupParent of either driver) with its limits, or update them.

    OSError when a hierarchy is missing or refuses a value; systemd_units.SystemdError (an
    OSError) when systemd refuses the slice.
    """
    unified = is_unified(root)
    if parent.endswith(SLICE):
        systemd_units.start_slice(parent, cgroup_limits.slice_properties(resources, unified))
        relative = relative_path(parent)
        made = systemd_units.wait_until(
            lambda: any(os.path.isdir(os.path.join(h, relative)) for h in hierarchies(root)),
            systemd_units.JOB_SECONDS)
        if not made:
            raise systemd_units.SystemdError(f"systemd started {parent} but its cgroup {relative} did not appear")
    elif unified:
        cgroup_limits.write_v2(root, parent.strip("/"), resources)
    else:
        cgroup_limits.write_v1(root, parent.strip("/"), resources)
