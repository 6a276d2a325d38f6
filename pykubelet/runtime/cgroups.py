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

from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.util.log import get_logger

log = get_logger(__name__)

CGROUP_ROOT = "/sys/fs/cgroup"
KUBEPODS = "kubepods"  # the top of the pods' cgroups (cgroupfs layout)
QOS_TIERS = ("", "burstable", "besteffort")


def pod_cgroup_dirs(uid: str, root: str = CGROUP_ROOT, kubepods: str = KUBEPODS) -> list[str]:
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
