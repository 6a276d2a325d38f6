"""Facts about this host that the Node object reports: capacity and nodeInfo."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass

_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "ppc64le": "ppc64le", "s390x": "s390x"}


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return ""


def meminfo_bytes(field: str) -> int:
    """A /proc/meminfo field (MemTotal, MemAvailable...) in bytes."""
    for line in _read("/proc/meminfo").splitlines():
        name, _, rest = line.partition(":")
        if name == field:
            return int(rest.split()[0]) * 1024
    return 0


def os_image() -> str:
    for line in _read("/etc/os-release").splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip('"')
    return "Linux"


def go_arch() -> str:
    machine = platform.machine()
    return _ARCH.get(machine, machine)


@dataclass(frozen=True)
class HostInfo:
    cpus: int
    memory_bytes: int
    ephemeral_storage_bytes: int
    machine_id: str
    system_uuid: str
    boot_id: str
    kernel_version: str
    os_image: str
    architecture: str
    swap_bytes: int = 0
    """SwapTotal when the agent started (the kubelet's machine info is read once, too)."""


def read_host_info(root_dir: str) -> HostInfo:
    """Capacity as the kubelet measures it: all CPUs, MemTotal, the size of the root dir's filesystem."""
    os.makedirs(root_dir, exist_ok=True)
    fs = os.statvfs(root_dir)
    return HostInfo(
        cpus=os.cpu_count() or 1,
        memory_bytes=meminfo_bytes("MemTotal"),
        ephemeral_storage_bytes=fs.f_blocks * fs.f_frsize,
        machine_id=_read("/etc/machine-id"),
        system_uuid=_read("/sys/class/dmi/id/product_uuid").lower(),
        boot_id=_read("/proc/sys/kernel/random/boot_id"),
        kernel_version=platform.release(),
        os_image=os_image(),
        architecture=go_arch(),
        swap_bytes=meminfo_bytes("SwapTotal"),
    )
