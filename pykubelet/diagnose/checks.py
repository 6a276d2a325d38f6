"""What `pykubelet doctor` checks with: one Check per question, and the Node it asks about.

A check has a verdict (OK, WARN, FAIL), a one-line title that answers its question, the evidence
it saw (lines a person can verify), and the one command that shows more. The checks of each area
live in their own module (doctor_agent, doctor_runtime, doctor_api, doctor_host); they share what
they learn through `Node` (the CRI status, the Node object...) so no fact is fetched twice.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from pykubelet.config import Settings

OK, WARN, FAIL = "OK", "WARN", "FAIL"
AREAS = ("Agent", "Container runtime", "Network", "Resources", "API server", "Clock", "Certificates")


@dataclass
class Check:
    area: str
    status: str
    title: str
    evidence: list[str] = field(default_factory=list)
    more: str = ""
    """The one command that shows more."""


@dataclass
class Node:
    """The node being checked: its settings, and what the checks learned so far."""

    settings: Settings
    settings_from: str
    """Where the settings came from, for the header ("the running agent (pid 42)", "the flags given")."""
    agent: dict[str, Any] | None = None
    """The running agent's /debug/agent, or None when it does not answer."""
    agent_url: str = ""
    runtime_status: Any = None
    """CRI StatusResponse (verbose), when the runtime answered."""
    runtime_info: dict[str, Any] = field(default_factory=dict)
    """Its verbose info, decoded: containerd's config (cni confDir, binDir), lastCNILoadStatus..."""
    node_object: dict[str, Any] | None = None
    """The Node as the apiserver has it, when it could be read."""
    nodes: list[dict[str, Any]] | None = None
    """Every Node, when this node may list them (it routes to their podCIDRs)."""
    apiserver_offset: float | None = None
    """Seconds the apiserver's clock is ahead of ours (its Date header), when it answered."""
    checks: list[Check] = field(default_factory=list)

    def add(self, area: str, status: str, title: str, evidence: list[str] | None = None, more: str = "") -> Check:
        check = Check(area, status, title, evidence or [], more)
        self.checks.append(check)
        return check


def ago(seconds_since_epoch: float) -> str:
    """'3s ago', '2m10s ago' from a wall-clock time."""
    delta = max(0.0, time.time() - seconds_since_epoch)
    if delta < 10:
        return f"{delta:.1f}s ago"
    return f"{span(delta)} ago"


def span(seconds: float) -> str:
    seconds = int(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            rest = seconds % size
            sub = {"d": ("h", 3600), "h": ("m", 60), "m": ("s", 1)}[unit]
            return f"{seconds // size}{unit}" + (f"{rest // sub[1]}{sub[0]}" if rest // sub[1] else "")
    return f"{seconds}s"


def size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""
