"""Our cgroup driver and the container runtime's, settled once at start.

The sandbox's CgroupParent is a path under one driver and a slice name under the other, and
runc reads it with the runtime's driver: a mismatch fails every pod, each with an error that
does not say why. As the kubelet does, a runtime that answers the CRI RuntimeConfig call
(containerd 2.x, CRI-O) decides: its driver replaces cgroupDriver. One that does not
(containerd 1.6 and 1.7) leaves cgroupDriver in force, and the agent checks it against the
configuration containerd reports in its verbose Status (the default runtime's SystemdCgroup):
on a mismatch it refuses to start, with one message naming both sides. A runtime that reports
neither is trusted.
"""

from __future__ import annotations

import json
from typing import Mapping

from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.runtime import systemd_units
from pykubelet.runtime.cgroups import CGROUPFS, SYSTEMD

CRI_DRIVERS = {api.SYSTEMD: SYSTEMD, api.CGROUPFS: CGROUPFS}


def from_status_info(info: Mapping[str, str]) -> str | None:
    """containerd's driver from its verbose Status: the default runtime's SystemdCgroup option."""
    try:
        config = json.loads(info.get("config", ""))
        containerd = config["containerd"]
        runtime = containerd["runtimes"][containerd["defaultRuntimeName"]]
    except (ValueError, KeyError, TypeError):
        return None
    options = runtime.get("options") or {}
    if not isinstance(options, dict):
        return None
    if runtime.get("runtimeType", "").startswith("io.containerd.runc") or "SystemdCgroup" in options:
        return SYSTEMD if options.get("SystemdCgroup") or config.get("systemdCgroup") else CGROUPFS
    return None


def from_runtime_config(answer: api.RuntimeConfigResponse) -> str | None:
    """The driver a RuntimeConfig answer names; None without a linux section (the kubelet then
    keeps its own). A value this agent does not know is an error, as in the kubelet."""
    if not answer.HasField("linux"):
        return None
    driver = CRI_DRIVERS.get(answer.linux.cgroup_driver)
    if driver is None:
        raise ValueError(f"runtime returned an unknown cgroup driver {answer.linux.cgroup_driver}")
    return driver


def runtime_driver(runtime_config: int | None, status_info: Mapping[str, str]) -> tuple[str | None, str]:
    """(the runtime's driver or None when it does not say, where that came from)."""
    if runtime_config is not None and runtime_config in CRI_DRIVERS:
        return CRI_DRIVERS[runtime_config], "the runtime's RuntimeConfig"
    found = from_status_info(status_info)
    return found, "the runtime's configuration (SystemdCgroup of its default runtime)" if found else ""


def mismatch(ours: str, theirs: str | None, source: str, systemd_running: bool | None = None) -> str | None:
    """The one error to stop on, or None when the drivers agree (or the runtime does not say)."""
    if ours == SYSTEMD and not (systemd_units.running() if systemd_running is None else systemd_running):
        return ("cgroupDriver is systemd, but systemd is not the init system here (no /run/systemd/system); "
                "use cgroupDriver: cgroupfs (and SystemdCgroup = false in containerd's config)")
    if theirs is None or theirs == ours:
        return None
    want = "true" if ours == SYSTEMD else "false"
    return (f"misconfiguration: the kubelet's cgroupDriver is {ours!r} but the container runtime uses {theirs!r} "
            f"(from {source}); set cgroupDriver: {theirs} in the kubelet's config (--cgroup-driver), or "
            f"SystemdCgroup = {want} in containerd's config and restart it")
