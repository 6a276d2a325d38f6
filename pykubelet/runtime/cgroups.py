"""The pod cgroups of the kubelet's cgroupfs layout, removed with the pod.

The runtime creates /kubepods/[burstable/|besteffort/]pod<uid>/<container> under each cgroup v1
hierarchy (and in the unified one) when it starts the pod's containers there (the sandbox's
CgroupParent, see specs.pod_cgroup_parent); it removes the container cgroups with the
containers, and the pod's own directory is ours to remove.
"""

from __future__ import annotations

import os

from pykubelet.util.log import get_logger

log = get_logger(__name__)

CGROUP_ROOT = "/sys/fs/cgroup"
QOS_TIERS = ("", "burstable", "besteffort")


def pod_cgroup_dirs(uid: str, root: str = CGROUP_ROOT, kubepods: str = "kubepods") -> list[str]:
    """Every existing directory of the pod's cgroup, one per hierarchy (v1 and unified)."""
    hierarchies = [root] + [os.path.join(root, h) for h in sorted(os.listdir(root))
                            if os.path.isdir(os.path.join(root, h)) and not os.path.islink(os.path.join(root, h))]
    out = []
    for hierarchy in hierarchies:
        for tier in QOS_TIERS:
            path = os.path.join(hierarchy, kubepods, tier, f"pod{uid}")
            if os.path.isdir(path):
                out.append(path)
    return out


def remove_pod_cgroups(uid: str, root: str = CGROUP_ROOT) -> None:
    """rmdir the pod's cgroups, deepest first (a cgroup directory goes with rmdir, not unlink)."""
    try:
        paths = pod_cgroup_dirs(uid, root)
    except OSError:
        return
    for path in paths:
        for dirpath, _, _ in sorted(os.walk(path), key=lambda entry: -len(entry[0])):
            try:
                os.rmdir(dirpath)
            except OSError as e:
                log.warning("Could not remove a pod cgroup", uid=uid, path=dirpath, err=e.strerror)
                break
