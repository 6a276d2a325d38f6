"""A Pod parsed and validated from a plain dict (a manifest or an API object).

Every bad field is named with its path (`spec.containers[0].image: Required value`); the
typed model the rest of the agent reads is api/pod.py. A little over 250 lines: one Pod's
validation, every field of it, is one job.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from typing import Any

from pykubelet.api.errors import FieldError, InvalidObject
from pykubelet.api.field_reader import FieldReader as _Reader
from pykubelet.api.mount_parse import parse_volume_mounts
from pykubelet.api.probe_parse import ContainerProbes, parse_container_probes
from pykubelet.api.pod import (DEFAULT_GRACE_SECONDS, PROTOCOLS, PULL_POLICIES, RESTART_POLICIES, Container,
                               ContainerPort, EnvVar, Pod, Volume, default_pull_policy)
from pykubelet.api.quantity import cpu_millis, quantity_bytes

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
# A UID names the pod's directories (pods/<uid>, the log directory, the cgroup), so it must be one
# plain path component: API UIDs are UUIDs and static pods' are hex, both well inside this form.
_UID = re.compile(r"^[A-Za-z0-9][-A-Za-z0-9_.]{0,127}$")


def _parse_port(r: _Reader, raw: Any, path: str) -> ContainerPort | None:
    obj = r.mapping(raw, path)
    if not obj:
        return None
    if "containerPort" not in obj:
        r.fail(f"{path}.containerPort", "Required value")
    return ContainerPort(
        container_port=r.integer(obj, "containerPort", path, 0, 1, 65535),
        protocol=r.choice(obj, "protocol", path, PROTOCOLS, "TCP"),
        host_port=r.integer(obj, "hostPort", path, 0, 0, 65535),
        host_ip=r.string(obj, "hostIP", path),
        name=r.string(obj, "name", path),
    )


def _requests(r: _Reader, container: dict[str, Any], path: str) -> tuple[int, int]:
    """(cpu millicores, memory bytes) requested; limits stand in for missing requests, as in the API.
    Every cpu and memory amount is checked here, limits too, so nothing later meets a bad one; a
    null amount is a zero quantity, as the API decodes it."""
    resources = r.mapping(container.get("resources"), f"{path}.resources")
    amounts: dict[str, dict[str, int]] = {}
    for kind in ("requests", "limits"):
        given = r.mapping(resources.get(kind), f"{path}.resources.{kind}")
        amounts[kind] = {}
        for key, parse in (("cpu", cpu_millis), ("memory", quantity_bytes)):
            if given.get(key) is None:
                continue
            try:
                amounts[kind][key] = parse(given[key])
            except ValueError:
                r.fail(f"{path}.resources.{kind}.{key}", f"Invalid value: {given[key]!r}: must be a quantity")
    requested = {key: amounts["requests"].get(key, amounts["limits"].get(key, 0)) for key in ("cpu", "memory")}
    return requested["cpu"], requested["memory"]


def _parse_container(r: _Reader, raw: Any, path: str, host_network: bool = False,
                     init: bool = False, ephemeral: bool = False) -> Container | None:
    obj = r.mapping(raw, path)
    if not obj:
        r.fail(path, "must be a container object")
        return None
    name = r.string(obj, "name", path, required=True)
    if name and not _DNS1123_LABEL.match(name):
        r.fail(f"{path}.name", f"Invalid value: {name!r}: must be a lowercase RFC 1123 label")
    image = r.string(obj, "image", path, required=True)
    env = []
    for i, item in enumerate(r.items(obj.get("env"), f"{path}.env")):
        entry = r.mapping(item, f"{path}.env[{i}]")
        env_name = r.string(entry, "name", f"{path}.env[{i}]", required=True)
        if env_name and not _ENV_NAME.match(env_name):
            r.fail(f"{path}.env[{i}].name", f"Invalid value: {env_name!r}: must be a C identifier-like name")
        value_from = entry.get("valueFrom")
        if value_from is not None and not isinstance(value_from, dict):
            r.fail(f"{path}.env[{i}].valueFrom", "must be an object")
            value_from = None
        env.append(EnvVar(env_name, r.string(entry, "value", f"{path}.env[{i}]"), value_from))
    ports = [_parse_port(r, p, f"{path}.ports[{i}]") for i, p in enumerate(r.items(obj.get("ports"), f"{path}.ports"))]
    if host_network:  # the API's defaulting: a host-network pod holds its container ports on the node
        ports = [dataclasses.replace(p, host_port=p.host_port or p.container_port) if p else p for p in ports]
    requests = _requests(r, obj, path)
    probes = ContainerProbes() if ephemeral else parse_container_probes(
        r, obj, path, init=init, sidecar=init and obj.get("restartPolicy") == "Always")
    return Container(
        name=name,
        image=image,
        image_pull_policy=r.choice(obj, "imagePullPolicy", path, PULL_POLICIES, default_pull_policy(image)),
        cpu_request_millis=requests[0],
        memory_request_bytes=requests[1],
        command=r.strings(obj, "command", path),
        args=r.strings(obj, "args", path),
        env=tuple(env),
        working_dir=r.string(obj, "workingDir", path),
        ports=tuple(p for p in ports if p),
        tty=r.boolean(obj, "tty", path),
        stdin=r.boolean(obj, "stdin", path),
        restart_policy=r.choice(obj, "restartPolicy", path, ("Always",), "") if init else "",
        volume_mounts=tuple(parse_volume_mounts(r, obj, path)),
        startup_probe=probes.startup_probe,
        liveness_probe=probes.liveness_probe,
        readiness_probe=probes.readiness_probe,
        post_start=probes.post_start,
        pre_stop=probes.pre_stop,
        raw=obj,
    )


# What the API forbids on an ephemeral container: it only runs, next to the others, for debugging.
_NOT_FOR_EPHEMERAL = ("ports", "livenessProbe", "readinessProbe", "startupProbe", "lifecycle", "resources",
                      "resizePolicy", "restartPolicy")


def _parse_ephemeral(r: _Reader, obj: Any, path: str, targets: set[str]) -> Container | None:
    """spec.ephemeralContainers[]: a container without ports, probes, hooks or resources;
    `targets`: the names of the regular and init containers, which targetContainerName may name."""
    if isinstance(obj, dict):
        for key in _NOT_FOR_EPHEMERAL:
            if obj.get(key) not in (None, [], {}, ""):
                r.fail(f"{path}.{key}", "Forbidden: cannot be set for an Ephemeral Container")
    container = _parse_container(r, obj, path, host_network=False, ephemeral=True)
    if container is None:
        return None
    target = r.string(obj, "targetContainerName", path)
    if target and target not in targets:  # another ephemeral container is no target either (the API's rule)
        r.fail(f"{path}.targetContainerName", f"Not found: {target!r}")
    return dataclasses.replace(container, target_container_name=target)


def _parse_volumes(r: _Reader, spec: dict[str, Any]) -> list[Volume]:
    volumes = []
    for i, item in enumerate(r.items(spec.get("volumes"), "spec.volumes")):
        # A null entry decodes as an empty volume in the API, which its validation refuses: no name.
        volume = r.mapping(item, f"spec.volumes[{i}]")
        # A volume with no source is an emptyDir: the API's default, which the kubelet's decoding
        # of a static manifest applies too.
        kind = next((k for k in volume if k != "name"), "") or "emptyDir"
        source = volume.get(kind)
        name = r.string(volume, "name", f"spec.volumes[{i}]", required=True)
        if name and not _DNS1123_LABEL.match(name):  # it names directories under the pod's
            r.fail(f"spec.volumes[{i}].name", f"Invalid value: {name!r}: must be a lowercase RFC 1123 label")
        volumes.append(Volume(name=name, kind=kind, source=source if isinstance(source, dict) else {}))
    return volumes


def _fs_group(r: _Reader, spec: dict[str, Any]) -> int | None:
    ctx = spec.get("securityContext")
    if not isinstance(ctx, dict) or ctx.get("fsGroup") is None:
        return None
    return r.integer(ctx, "fsGroup", "spec.securityContext", 0, 0, 2**31 - 1)


def _fs_group_change_policy(r: _Reader, spec: dict[str, Any]) -> str:
    ctx = spec.get("securityContext")
    if not isinstance(ctx, dict):
        return ""
    return r.choice(ctx, "fsGroupChangePolicy", "spec.securityContext", ("OnRootMismatch", "Always"), "")


ANNOTATIONS_LIMIT_BYTES = 256 * 1024  # the apiserver's limit on all of an object's annotations together


def parse_pod(raw: Any, where: str) -> Pod:
    """A validated Pod from a decoded manifest or API object; InvalidObject names every bad field."""
    r = _Reader()
    if not isinstance(raw, dict):
        raise InvalidObject(where, "Pod", "", [FieldError("(root)", "must be an object (a Pod manifest)")])
    name = ""
    meta = r.mapping(raw.get("metadata"), "metadata")
    if raw.get("kind") not in (None, "Pod"):
        r.fail("kind", f"Unsupported value: {raw.get('kind')!r}: must be \"Pod\"")
    if raw.get("apiVersion") not in (None, "v1"):
        r.fail("apiVersion", f"Unsupported value: {raw.get('apiVersion')!r}: must be \"v1\"")
    name = r.string(meta, "name", "metadata", required=True)
    if name and (len(name) > 253 or not _DNS1123_SUBDOMAIN.match(name)):
        r.fail("metadata.name", f"Invalid value: {name!r}: must be a lowercase RFC 1123 subdomain")
    namespace = r.string(meta, "namespace", "metadata") or "default"
    if not _DNS1123_LABEL.match(namespace):
        r.fail("metadata.namespace", f"Invalid value: {namespace!r}: must be a lowercase RFC 1123 label")
    uid = r.string(meta, "uid", "metadata")
    if uid and not _UID.match(uid):
        r.fail("metadata.uid", f"Invalid value: {uid!r}: must be at most 128 letters, digits, '-', '_' or '.', "
                               "starting with a letter or digit (it names the pod's directories)")
    spec = r.mapping(raw.get("spec"), "spec")
    raw_containers = r.items(spec.get("containers"), "spec.containers")
    if not raw_containers and "spec.containers" not in {e.path for e in r.errors}:
        r.fail("spec.containers", "Required value")
    host_network = r.boolean(spec, "hostNetwork", "spec")
    containers = [_parse_container(r, c, f"spec.containers[{i}]", host_network) for i, c in enumerate(raw_containers)]
    init_containers = [_parse_container(r, c, f"spec.initContainers[{i}]", host_network, init=True)
                       for i, c in enumerate(r.items(spec.get("initContainers"), "spec.initContainers"))]
    raw_ephemerals = r.items(spec.get("ephemeralContainers"), "spec.ephemeralContainers")
    targets = {c.name for c in (*containers, *init_containers) if c}
    ephemerals = [_parse_ephemeral(r, c, f"spec.ephemeralContainers[{i}]", targets)
                  for i, c in enumerate(raw_ephemerals)]
    seen: set[str] = set()
    for kind, group in (("initContainers", init_containers), ("containers", containers),
                        ("ephemeralContainers", ephemerals)):
        for i, c in enumerate(group):
            if c and c.name in seen:
                r.fail(f"spec.{kind}[{i}].name", f"Duplicate value: {c.name!r}")
            if c:
                seen.add(c.name)
    pod = Pod(
        name=name,
        namespace=namespace,
        uid=uid,
        containers=tuple(c for c in containers if c),
        init_containers=tuple(c for c in init_containers if c),
        ephemeral_containers=tuple(c for c in ephemerals if c),
        restart_policy=r.choice(spec, "restartPolicy", "spec", RESTART_POLICIES, "Always"),
        termination_grace_period_seconds=r.integer(
            spec, "terminationGracePeriodSeconds", "spec", DEFAULT_GRACE_SECONDS, 0, 2**31 - 1),
        host_network=host_network,
        node_name=r.string(spec, "nodeName", "spec"),
        labels=r.string_map(meta, "labels", "metadata"),
        annotations=r.string_map(meta, "annotations", "metadata"),
        deletion_timestamp=r.string(meta, "deletionTimestamp", "metadata"),
        deletion_grace_period_seconds=meta.get("deletionGracePeriodSeconds"),
        volumes=tuple(_parse_volumes(r, spec)),
        fs_group=_fs_group(r, spec),
        fs_group_change_policy=_fs_group_change_policy(r, spec),
        raw=raw,
    )
    if sum(len(k) + len(v) for k, v in pod.annotations.items()) > ANNOTATIONS_LIMIT_BYTES:
        r.fail("metadata.annotations", f"Too long: must have at most {ANNOTATIONS_LIMIT_BYTES} bytes")
    raw_inits = spec.get("initContainers")
    _check_node_local(r, spec, raw_containers, raw_inits if isinstance(raw_inits, list) else [], raw_ephemerals)
    if r.errors:
        raise InvalidObject(where, "Pod", name, r.errors)
    return pod


TERMINATION_MESSAGE_POLICIES = ("File", "FallbackToLogsOnError")
_SYSCTL_NAME = re.compile(r"^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?$")


def _check_node_local(r: _Reader, spec: dict[str, Any], containers: list[Any], init_containers: list[Any],
                      ephemerals: list[Any] = ()) -> None:
    """Validation of the node-local fields (namespaces, sysctls, hostAliases, hostname,
    termination messages) that the Pod properties above read."""
    for key in ("hostPID", "hostIPC", "shareProcessNamespace"):
        r.boolean(spec, key, "spec")
    if spec.get("hostPID") and spec.get("shareProcessNamespace"):
        r.fail("spec.shareProcessNamespace", "Invalid value: true: ShareProcessNamespace and HostPID cannot both be enabled")
    for key in ("hostname", "subdomain"):
        value = r.string(spec, key, "spec")
        if value and not _DNS1123_LABEL.match(value):
            r.fail(f"spec.{key}", f"Invalid value: {value!r}: must be a lowercase RFC 1123 label")
    override = r.string(spec, "hostnameOverride", "spec")
    if override and (len(override) > 253 or not _DNS1123_SUBDOMAIN.match(override)):
        r.fail("spec.hostnameOverride", f"Invalid value: {override!r}: must be a lowercase RFC 1123 subdomain")
    if override and spec.get("hostNetwork"):
        r.fail("spec.hostnameOverride", "Invalid value: hostnameOverride cannot be set when hostNetwork is true")
    ctx = r.mapping(spec.get("securityContext"), "spec.securityContext")
    for i, item in enumerate(r.items(ctx.get("sysctls"), "spec.securityContext.sysctls")):
        path = f"spec.securityContext.sysctls[{i}]"
        entry = r.mapping(item, path)
        sysctl = r.string(entry, "name", path, required=True)
        if sysctl and (len(sysctl) > 253 or not _SYSCTL_NAME.match(sysctl)):
            r.fail(f"{path}.name", f"Invalid value: {sysctl!r}: must have at most 253 characters and match "
                                   f"regex {_SYSCTL_NAME.pattern}")
        r.string(entry, "value", path)
    for i, item in enumerate(r.items(spec.get("hostAliases"), "spec.hostAliases")):
        path = f"spec.hostAliases[{i}]"
        alias = r.mapping(item, path)
        ip = r.string(alias, "ip", path, required=True)
        try:
            if ip:
                ipaddress.ip_address(ip)
        except ValueError:
            r.fail(f"{path}.ip", f"Invalid value: {ip!r}: must be a valid IP address")
        for j, hostname in enumerate(r.strings(alias, "hostnames", path)):
            if not _DNS1123_SUBDOMAIN.match(hostname):
                r.fail(f"{path}.hostnames[{j}]", f"Invalid value: {hostname!r}: must be a lowercase RFC 1123 subdomain")
    for kind, group in (("containers", containers), ("initContainers", init_containers),
                        ("ephemeralContainers", ephemerals)):
        for i, container in enumerate(group):
            if not isinstance(container, dict):
                continue
            path = f"spec.{kind}[{i}]"
            r.choice(container, "terminationMessagePolicy", path, TERMINATION_MESSAGE_POLICIES, "File")
            message_path = r.string(container, "terminationMessagePath", path)
            if message_path and not message_path.startswith("/"):
                r.fail(f"{path}.terminationMessagePath", f"Invalid value: {message_path!r}: must be an absolute path")
