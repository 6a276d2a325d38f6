"""A container's probes and lifecycle hooks, parsed and validated as the apiserver does.

Every bad field is named with its path (`spec.containers[0].readinessProbe.periodSeconds: ...`),
so a malformed probe is refused with the pod instead of failing later in its probe task.
pod_parse calls parse_container_probes for every app and init container.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from pykubelet.api.field_reader import FieldReader
from pykubelet.api.probe import (ExecAction, GRPCAction, HookAction, HTTPGetAction, HTTPHeader, LifecycleHandler,
                                 Port, Probe, ProbeAction, SleepAction, TCPSocketAction)

_INT32_MAX = 2**31 - 1
_HTTP_SCHEMES = ("HTTP", "HTTPS")
_HTTP_HEADER_NAME = re.compile(r"^[-A-Za-z0-9!#$%&'*+.^_`|~]+$")  # an RFC 7230 token
_PORT_NAME = re.compile(r"^[-a-z0-9]+$")
_PROBE_HANDLERS = ("exec", "httpGet", "tcpSocket", "grpc")
_HOOK_HANDLERS = ("exec", "httpGet", "tcpSocket", "sleep")
_NOT_FOR_INIT = ("lifecycle", "livenessProbe", "readinessProbe", "startupProbe")


@dataclass(frozen=True)
class ContainerProbes:
    """What a container asks to be probed with and which hooks it runs."""

    startup_probe: Probe | None = None
    liveness_probe: Probe | None = None
    readiness_probe: Probe | None = None
    post_start: LifecycleHandler | None = None
    pre_stop: LifecycleHandler | None = None


def _port_name_problem(name: str) -> str:
    """Why `name` is not an IANA_SVC_NAME, "" if it is one."""
    if len(name) > 15:
        return "must be no more than 15 characters"
    if not _PORT_NAME.match(name):
        return "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)"
    if "--" in name:
        return "must not contain consecutive hyphens"
    if not re.search("[a-z]", name):
        return "must contain at least one letter (a-z)"
    if name.startswith("-") or name.endswith("-"):
        return "must not begin or end with a hyphen"
    return ""


def _port(r: FieldReader, obj: dict[str, Any], path: str, names_allowed: bool = True) -> Port:
    value = obj.get("port")
    if value is None or value == "":
        r.fail(f"{path}.port", "Required value")
    elif isinstance(value, int) and not isinstance(value, bool):
        if 1 <= value <= 65535:
            return value
        r.fail(f"{path}.port", f"Invalid value: {value}: must be between 1 and 65535, inclusive")
    elif isinstance(value, str) and names_allowed:
        problem = _port_name_problem(value)
        if not problem:
            return value
        r.fail(f"{path}.port", f"Invalid value: {value!r}: {problem}")
    else:
        r.fail(f"{path}.port", f"must be {'an integer or a port name' if names_allowed else 'an integer'}, "
                               f"got {value!r}")
    return 0


def _http_get(r: FieldReader, obj: dict[str, Any], path: str) -> HTTPGetAction:
    headers = []
    for i, item in enumerate(r.items(obj.get("httpHeaders"), f"{path}.httpHeaders")):
        entry = r.mapping(item, f"{path}.httpHeaders[{i}]")
        name = r.string(entry, "name", f"{path}.httpHeaders[{i}]", required=True)
        if name and not _HTTP_HEADER_NAME.match(name):
            r.fail(f"{path}.httpHeaders", f"Invalid value: {name!r}: a valid HTTP header must consist of "
                                          "alphanumeric characters, '-' and the RFC 7230 token characters")
        headers.append(HTTPHeader(name, r.string(entry, "value", f"{path}.httpHeaders[{i}]")))
    return HTTPGetAction(port=_port(r, obj, path), path=r.string(obj, "path", path) or "/",
                         host=r.string(obj, "host", path), scheme=r.choice(obj, "scheme", path, _HTTP_SCHEMES, "HTTP"),
                         headers=tuple(headers))


def _action(r: FieldReader, handler: dict[str, Any], path: str,
            kinds: tuple[str, ...]) -> ProbeAction | HookAction | None:
    """The one action `handler` names; the apiserver's messages for none or several."""
    given = [k for k in kinds if handler.get(k) is not None]
    if not given:
        r.fail(path, "Required value: must specify a handler type")
        return None
    for extra in given[1:]:
        r.fail(f"{path}.{extra}", "Forbidden: may not specify more than 1 handler type")
    kind = given[0]
    where = f"{path}.{kind}"
    obj = r.mapping(handler[kind], where)
    if kind == "exec":
        command = r.strings(obj, "command", where)
        if not command:
            r.fail(f"{where}.command", "Required value")
        return ExecAction(command)
    if kind == "httpGet":
        return _http_get(r, obj, where)
    if kind == "tcpSocket":
        return TCPSocketAction(port=_port(r, obj, where), host=r.string(obj, "host", where))
    if kind == "grpc":
        return GRPCAction(port=int(_port(r, obj, where, names_allowed=False)), service=r.string(obj, "service", where))
    return SleepAction(r.integer(obj, "seconds", where, 0, 0, _INT32_MAX))


def _seconds(r: FieldReader, obj: dict[str, Any], key: str, path: str, default: int) -> int:
    """A non-negative int32 field; 0 (Go's zero value) means the default, as the API's defaulting."""
    value = obj.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        r.fail(f"{path}.{key}", f"must be an integer, got {value!r}")
        return default
    if not 0 <= value <= _INT32_MAX:
        r.fail(f"{path}.{key}", f"Invalid value: {value}: must be greater than or equal to 0"
               if value < 0 else f"Invalid value: {value}: must be at most {_INT32_MAX}")
        return default
    return value or default


def parse_probe(r: FieldReader, raw: Any, path: str, kind: str) -> Probe | None:
    """One of a container's probes (`kind` as the API names it); None when not set."""
    if raw is None or not isinstance(raw, dict):
        r.mapping(raw, path)  # names a probe that is not an object
        return None
    obj = raw
    action = _action(r, obj, path, _PROBE_HANDLERS)
    success_threshold = _seconds(r, obj, "successThreshold", path, 1)
    if kind != "readinessProbe" and success_threshold != 1:
        r.fail(f"{path}.successThreshold", f"Invalid value: {success_threshold}: must be 1")
    grace = obj.get("terminationGracePeriodSeconds")
    if grace is not None:
        if isinstance(grace, bool) or not isinstance(grace, int):
            r.fail(f"{path}.terminationGracePeriodSeconds", f"must be an integer, got {grace!r}")
            grace = None
        elif kind == "readinessProbe":
            r.fail(f"{path}.terminationGracePeriodSeconds", f"Invalid value: {grace}: must not be set for "
                                                             "readinessProbes")
        elif not 0 < grace <= 2**63 - 1:
            r.fail(f"{path}.terminationGracePeriodSeconds", f"Invalid value: {grace}: must be greater than 0")
            grace = None
    probe = Probe(action=action or ExecAction(()),
                  initial_delay_seconds=_seconds(r, obj, "initialDelaySeconds", path, 0),
                  timeout_seconds=_seconds(r, obj, "timeoutSeconds", path, 1),
                  period_seconds=_seconds(r, obj, "periodSeconds", path, 10),
                  success_threshold=success_threshold,
                  failure_threshold=_seconds(r, obj, "failureThreshold", path, 3),
                  termination_grace_period_seconds=grace if kind != "readinessProbe" else None)
    return probe if action is not None else None


def parse_handler(r: FieldReader, raw: Any, path: str) -> LifecycleHandler | None:
    """lifecycle.postStart or lifecycle.preStop; an empty one is no hook."""
    obj = r.mapping(raw, path)
    if not obj:
        return None
    action = _action(r, obj, path, _HOOK_HANDLERS)
    return LifecycleHandler(action) if action is not None else None


def parse_container_probes(r: FieldReader, container: dict[str, Any], path: str,
                           init: bool = False, sidecar: bool = False) -> ContainerProbes:
    """The probes and hooks of an app or init container; an init container that is not a sidecar
    may have neither (it runs to completion, nothing probes or stops it)."""
    if init and not sidecar:
        for key in _NOT_FOR_INIT:
            if container.get(key) not in (None, {}):
                r.fail(f"{path}.{key}", "Forbidden: may not be set for init containers without restartPolicy=Always")
        return ContainerProbes()
    lifecycle = r.mapping(container.get("lifecycle"), f"{path}.lifecycle")
    return ContainerProbes(
        startup_probe=parse_probe(r, container.get("startupProbe"), f"{path}.startupProbe", "startupProbe"),
        liveness_probe=parse_probe(r, container.get("livenessProbe"), f"{path}.livenessProbe", "livenessProbe"),
        readiness_probe=parse_probe(r, container.get("readinessProbe"), f"{path}.readinessProbe", "readinessProbe"),
        post_start=parse_handler(r, lifecycle.get("postStart"), f"{path}.lifecycle.postStart"),
        pre_stop=parse_handler(r, lifecycle.get("preStop"), f"{path}.lifecycle.preStop"),
    )


def recorded_handler(annotation: str) -> LifecycleHandler | None:
    """The preStop hook a container recorded in its annotations (LifecycleHandler.to_dict), or
    None when there is none or it is not one we wrote (anyone with runtime access can set it)."""
    try:
        raw = json.loads(annotation) if annotation else None
    except ValueError:
        return None
    r = FieldReader()
    handler = parse_handler(r, raw, "preStop")
    return handler if not r.errors else None
