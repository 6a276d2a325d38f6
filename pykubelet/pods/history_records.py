"""The records of pods/history.py: a step, a probe's last result, one pod's bounded record, and
what the runtime says of a sandbox's network (its netns, its CNI result, the chain it runs).
"""

from __future__ import annotations

import json
import os
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from pykubelet.cni.config import ConfigError, config_files, load_conflist

HEAD_STEPS = 25
TAIL_STEPS = 100
GONE_PODS = 50
LIVE_PODS = 1000  # more records than pods can run: those no step touched for longest count as gone

# Step kinds: what part of the pod path a step comes from.
ADMISSION, VOLUMES, SANDBOX, IMAGE, CONTAINER, EXIT, BACKOFF, PROBE, STOP, TERMINATION = (
    "admission", "volumes", "sandbox", "image", "container", "exit", "back-off", "probe", "stop", "termination")


@dataclass
class Step:
    at: float
    kind: str
    text: str
    ok: bool | None = True
    """False: something failed; None: neither (a decision, a fact)."""
    container: str = ""
    seconds: float | None = None
    """How long the step took, when it is an action."""
    details: dict[str, Any] = field(default_factory=dict)
    """The facts behind the text (exit code, bytes, retry_at...), for scripts and the verdict."""
    count: int = 1
    last_at: float = 0.0


@dataclass
class ProbeRecord:
    ok: bool
    message: str
    at: float
    streak: int = 1
    """Results in a row equal to this one."""
    since: float = 0.0
    last_failure: str = ""
    last_failure_at: float = 0.0


@dataclass
class PodRecord:
    uid: str
    namespace: str
    name: str
    first_seen: float
    last_sync: float = 0.0
    head: list[Step] = field(default_factory=list)
    tail: deque[Step] = field(default_factory=lambda: deque(maxlen=TAIL_STEPS))
    dropped: int = 0
    probes: dict[tuple[str, str], ProbeRecord] = field(default_factory=dict)
    seen: dict[str, str] = field(default_factory=dict)  # runtime object id -> state last observed
    volumes: tuple = ()  # the last volume outcome recorded
    observed: bool = False  # the runtime was looked at once (what it held then was found, not started)
    present_images: set[tuple[str, str]] = field(default_factory=set)  # (container, image) said present once
    gone_at: float = 0.0
    touched: float = 0.0

    def last(self) -> Step | None:
        return self.tail[-1] if self.tail else (self.head[-1] if self.head else None)


def short_id(object_id: str) -> str:
    return object_id[:13]


def size_text(n: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return ""


def sandbox_network(info: dict[str, str]) -> dict[str, Any]:
    """The netns and CNI result containerd reports in a verbose PodSandboxStatus (its "info")."""
    try:
        doc = json.loads(info.get("info", "") or "{}")
    except ValueError:
        return {}
    namespaces = ((doc.get("runtimeSpec") or {}).get("linux") or {}).get("namespaces") or []
    netns = next((n.get("path", "") for n in namespaces if n.get("type") == "network"), "")
    interfaces = {}
    for name, iface in ((doc.get("cniResult") or {}).get("Interfaces") or {}).items():
        addresses = [ip.get("IP", "") for ip in iface.get("IPConfigs") or []]
        if addresses or iface.get("Sandbox"):
            interfaces[name] = {"addresses": addresses, "mac": iface.get("Mac", ""), "in_pod": bool(iface.get("Sandbox"))}
    return {k: v for k, v in (("netns", netns), ("cni_interfaces", interfaces)) if v}


def runtime_cni_chain(conf_dir: str) -> str:
    """The plugin chain the runtime runs for a sandbox: its first config in conf_dir (as containerd
    picks it), e.g. "pykubelet-cni" or "bridge → portmap"; "" when there is none or it does not load
    (containerd then gives pods no network: it never falls back to the next file)."""
    try:
        names = config_files(os.listdir(conf_dir))
    except OSError:
        return ""
    if not names:
        return ""
    try:
        return " → ".join(p.get("type", "?") for p in load_conflist(os.path.join(conf_dir, names[0])).plugins)
    except ConfigError:
        return ""
