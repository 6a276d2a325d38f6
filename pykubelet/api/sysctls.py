"""Pod sysctls: which ones a node allows, as the kubelet's sysctl admission decides.

Safe sysctls are namespaced and isolated from other pods, so every pod may set them;
`allowedUnsafeSysctls` (names, or prefixes ending in `*`) lets more through. Anything else
is refused at admission with reason SysctlForbidden. A sysctl of the network namespace is
refused for a host-network pod, one of the IPC namespace for a host-IPC pod.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Iterable

IPC_NAMESPACE, NET_NAMESPACE = "IPC", "Net"
FORBIDDEN_REASON = "SysctlForbidden"

# (name, the first kernel version that namespaces it); the kubelet's safe list.
SAFE_SYSCTLS: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("kernel.shm_rmid_forced", ()),
    ("net.ipv4.ip_local_port_range", ()),
    ("net.ipv4.tcp_syncookies", ()),
    ("net.ipv4.ping_group_range", ()),
    ("net.ipv4.ip_unprivileged_port_start", ()),
    ("net.ipv4.ip_local_reserved_ports", (3, 16)),
    ("net.ipv4.tcp_keepalive_time", (4, 5)),
    ("net.ipv4.tcp_fin_timeout", (4, 6)),
    ("net.ipv4.tcp_keepalive_intvl", (4, 5)),
    ("net.ipv4.tcp_keepalive_probes", (4, 5)),
    ("net.ipv4.tcp_rmem", (4, 15)),
    ("net.ipv4.tcp_wmem", (4, 15)),
)

# Which namespace a sysctl lives in: exact names and prefixes (the rest are not namespaced).
_NAMESPACED_NAMES = {"kernel.sem": IPC_NAMESPACE}
_NAMESPACED_PREFIXES = (("kernel.shm", IPC_NAMESPACE), ("kernel.msg", IPC_NAMESPACE),
                        ("fs.mqueue.", IPC_NAMESPACE), ("net.", NET_NAMESPACE))


def normalize(name: str) -> str:
    """kernel/shm_rmid_forced -> kernel.shm_rmid_forced: a sysctl written with slashes
    (where dots then belong to a component, like an interface name) in the dotted form."""
    first = re.search(r"[./]", name)
    if first is None or first.group() == ".":
        return name
    return name.translate(str.maketrans("./", "/."))


def namespace_of(name: str) -> str:
    """IPC, Net, or "" for a sysctl that is not namespaced (so never safe for a pod)."""
    name = normalize(name)
    if name in _NAMESPACED_NAMES:
        return _NAMESPACED_NAMES[name]
    for prefix, namespace in _NAMESPACED_PREFIXES:
        if name.startswith(prefix):
            return namespace
    return ""


def kernel_version(release: str | None = None) -> tuple[int, ...]:
    """(major, minor) from `uname -r` (6.1.0-18-amd64 -> (6, 1)); () if unreadable."""
    match = re.match(r"(\d+)\.(\d+)", release if release is not None else os.uname().release)
    return (int(match.group(1)), int(match.group(2))) if match else ()


def safe_sysctls(kernel: tuple[int, ...]) -> list[str]:
    """The safe sysctls this kernel namespaces."""
    return [name for name, since in SAFE_SYSCTLS if not since or (kernel and kernel >= since)]


@dataclass(frozen=True)
class SysctlAllowlist:
    names: dict[str, str] = field(default_factory=dict)
    """Allowed name -> its namespace."""
    prefixes: dict[str, str] = field(default_factory=dict)
    """Allowed prefix (from `prefix*`) -> its namespace."""

    @classmethod
    def build(cls, allowed_unsafe: Iterable[str] = (), kernel: tuple[int, ...] | None = None) -> "SysctlAllowlist":
        """The safe sysctls plus allowedUnsafeSysctls; ValueError for one that is not namespaced."""
        names: dict[str, str] = {}
        prefixes: dict[str, str] = {}
        for entry in [*safe_sysctls(kernel_version() if kernel is None else kernel), *allowed_unsafe]:
            name = normalize(entry)
            namespace = namespace_of(name.rstrip("*"))
            if not namespace:
                raise ValueError(f"the sysctls {entry!r} are not known to be namespaced")
            if name.endswith("*"):
                prefixes[name[:-1]] = namespace
            else:
                names[name] = namespace
        return cls(names, prefixes)

    def check(self, name: str, host_network: bool, host_ipc: bool) -> str:
        """"" if a pod may set this sysctl; else why not (the kubelet's wording)."""
        name = normalize(name)
        namespace = self.names.get(name)
        if namespace is None:
            namespace = next((ns for prefix, ns in self.prefixes.items() if name.startswith(prefix)), None)
        if namespace is None:
            return f'"{name}" not allowlisted'
        if (namespace == IPC_NAMESPACE and host_ipc) or (namespace == NET_NAMESPACE and host_network):
            return f'"{name}" not allowed with host {namespace} enabled'
        return ""

    def forbidden(self, sysctls: Iterable[str], host_network: bool, host_ipc: bool) -> str:
        """The admission message for the first sysctl refused, or "" if all are allowed."""
        for name in sysctls:
            why = self.check(name, host_network, host_ipc)
            if why:
                return f"forbidden sysctl: {why}"
        return ""
