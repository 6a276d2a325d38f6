"""Probes (startup, liveness, readiness) and lifecycle hook handlers (postStart, preStop), typed.

Parsing and validation from a container's dict are api/probe_parse.py's job; the probe workers
(probes/manager.py, probes/check.py) and the hook runner (probes/hooks.py) read these.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PROBE_KINDS = ("startupProbe", "livenessProbe", "readinessProbe")
"""The three probes a container may have, as the API names them."""

Port = int | str
"""A port number (1-65535) or the name of one of the container's ports (an IANA_SVC_NAME)."""


@dataclass(frozen=True)
class ExecAction:
    command: tuple[str, ...]


@dataclass(frozen=True)
class HTTPHeader:
    name: str
    value: str


@dataclass(frozen=True)
class HTTPGetAction:
    port: Port
    path: str = "/"
    host: str = ""
    """"" for the pod's IP."""
    scheme: str = "HTTP"
    headers: tuple[HTTPHeader, ...] = ()


@dataclass(frozen=True)
class TCPSocketAction:
    port: Port
    host: str = ""


@dataclass(frozen=True)
class GRPCAction:
    port: int
    service: str = ""


@dataclass(frozen=True)
class SleepAction:
    seconds: int


ProbeAction = ExecAction | HTTPGetAction | TCPSocketAction | GRPCAction
HookAction = ExecAction | HTTPGetAction | TCPSocketAction | SleepAction
"""tcpSocket is accepted in a hook for old manifests and never run, as with the kubelet."""


@dataclass(frozen=True)
class Probe:
    """One probe with the API's defaults applied."""

    action: ProbeAction
    initial_delay_seconds: int = 0
    timeout_seconds: int = 1
    period_seconds: int = 10
    success_threshold: int = 1
    failure_threshold: int = 3
    termination_grace_period_seconds: int | None = None
    """Only on liveness and startup probes: the grace a kill for this probe's failure gets."""


@dataclass(frozen=True)
class LifecycleHandler:
    """lifecycle.postStart or lifecycle.preStop."""

    action: HookAction

    def to_dict(self) -> dict[str, Any]:
        """The handler in the API's shape: what a container's preStop annotation records, so the
        hook still runs for a container whose pod spec is gone (api/probe_parse.py reads it back)."""
        action = self.action
        if isinstance(action, ExecAction):
            return {"exec": {"command": list(action.command)}}
        if isinstance(action, SleepAction):
            return {"sleep": {"seconds": action.seconds}}
        if isinstance(action, TCPSocketAction):
            return {"tcpSocket": {"port": action.port, **({"host": action.host} if action.host else {})}}
        http: dict[str, Any] = {"path": action.path, "port": action.port, "scheme": action.scheme}
        if action.host:
            http["host"] = action.host
        if action.headers:
            http["httpHeaders"] = [{"name": h.name, "value": h.value} for h in action.headers]
        return {"httpGet": http}
