"""A pod cgroup's limits as files (cgroupfs driver, v1 or v2) or as systemd unit properties.

The numbers come from resources.pod_cgroup_resources in cgroup v1's units (CPU shares, a CFS
quota per period, bytes). v2 and systemd take CPU as a weight, converted as runc and the
kubelet convert it, so a pod gets the same share under any driver and version.
"""

from __future__ import annotations

import os

from pykubelet.cri.v1 import api_pb2 as api

MIN_SHARES, MAX_SHARES = 2, 262144
MIN_WEIGHT, MAX_WEIGHT = 1, 10000
QUOTA_STEP_PER_SEC_USEC = 10_000  # systemd sets CPUQuota in steps of 1% of a CPU


def shares_to_weight(shares: int) -> int:
    """cpu.shares [2, 262144] onto cpu.weight [1, 10000], linearly (runc's and the kubelet's rule)."""
    shares = min(MAX_SHARES, max(MIN_SHARES, shares))
    return MIN_WEIGHT + (shares - MIN_SHARES) * (MAX_WEIGHT - MIN_WEIGHT) // (MAX_SHARES - MIN_SHARES)


def _write(path: str, value: object) -> None:
    with open(path, "w") as f:
        f.write(str(value))


def write_v1(root: str, relative: str, resources: api.LinuxContainerResources) -> None:
    """cgroup v1: the pod's directory in the cpu and memory hierarchies, with shares, quota and limit."""
    cpu = os.path.join(root, "cpu", relative)
    memory = os.path.join(root, "memory", relative)
    for path in (cpu, memory):
        os.makedirs(path, exist_ok=True)
    _write(os.path.join(cpu, "cpu.shares"), resources.cpu_shares)
    if resources.cpu_quota:
        _write(os.path.join(cpu, "cpu.cfs_period_us"), resources.cpu_period)
        _write(os.path.join(cpu, "cpu.cfs_quota_us"), resources.cpu_quota)
    _write(os.path.join(memory, "memory.limit_in_bytes"), resources.memory_limit_in_bytes or -1)


def _enable_controllers(parent: str, wanted: tuple[str, ...]) -> None:
    """v2 hands a controller to a child only when its parent lists it in cgroup.subtree_control."""
    try:
        with open(os.path.join(parent, "cgroup.controllers")) as f:
            available = set(f.read().split())
        with open(os.path.join(parent, "cgroup.subtree_control")) as f:
            enabled = set(f.read().split())
    except FileNotFoundError:
        return
    missing = [c for c in wanted if c in available and c not in enabled]
    if missing:
        _write(os.path.join(parent, "cgroup.subtree_control"), " ".join(f"+{c}" for c in missing))


def write_v2(root: str, relative: str, resources: api.LinuxContainerResources) -> None:
    """cgroup v2: the pod's directory with cpu.weight, cpu.max and memory.max, after every
    ancestor from the root down hands the cpu, memory and pids controllers on."""
    parts = relative.split("/")
    for depth in range(len(parts)):
        parent = os.path.join(root, *parts[:depth])
        _enable_controllers(parent, ("cpu", "memory", "pids"))
        os.makedirs(os.path.join(parent, parts[depth]), exist_ok=True)
    path = os.path.join(root, relative)
    _enable_controllers(path, ("cpu", "memory", "pids"))  # runc makes the containers' cgroups below
    if resources.cpu_shares:
        _write(os.path.join(path, "cpu.weight"), shares_to_weight(resources.cpu_shares))
    period = resources.cpu_period or 100_000
    _write(os.path.join(path, "cpu.max"), f"{resources.cpu_quota or 'max'} {period}")
    _write(os.path.join(path, "memory.max"), resources.memory_limit_in_bytes or "max")


def slice_properties(resources: api.LinuxContainerResources, unified: bool) -> list[tuple[str, tuple[str, object]]]:
    """The pod slice's systemd properties (D-Bus name, (signature, value)), as the kubelet's systemd
    cgroup manager sets them: accounting on, no default dependencies (a pod slice must not be
    ordered against shutdown targets), and the limits in the names of this cgroup version."""
    props: list[tuple[str, tuple[str, object]]] = [
        ("Description", ("s", "pykubelet pod slice")),
        ("DefaultDependencies", ("b", False)),
        ("CPUAccounting", ("b", True)),
        ("MemoryAccounting", ("b", True)),
        ("TasksAccounting", ("b", True)),
    ]
    if resources.cpu_shares:
        props.append(("CPUWeight", ("t", shares_to_weight(resources.cpu_shares))) if unified
                     else ("CPUShares", ("t", resources.cpu_shares)))
    if resources.cpu_quota and resources.cpu_period:
        per_sec = resources.cpu_quota * 1_000_000 // resources.cpu_period
        per_sec = -(-per_sec // QUOTA_STEP_PER_SEC_USEC) * QUOTA_STEP_PER_SEC_USEC  # round up, never below
        props += [("CPUQuotaPerSecUSec", ("t", per_sec)), ("CPUQuotaPeriodUSec", ("t", resources.cpu_period))]
    if resources.memory_limit_in_bytes:
        props.append(("MemoryMax" if unified else "MemoryLimit", ("t", resources.memory_limit_in_bytes)))
    return props
