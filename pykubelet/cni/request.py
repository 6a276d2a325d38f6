"""What a plugin receives: the request config on stdin and the CNI_* environment.

Pure functions, so the exact bytes each plugin of a chain sees are unit-tested.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

CONTAINER_ID = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$")
_IFNAME_MAX = 15  # IFNAMSIZ - 1


@dataclass(frozen=True)
class Attachment:
    """The runtime side of one ADD/DEL/CHECK: which container, which netns, which interface.

    `args` become CNI_ARGS (K8S_POD_NAMESPACE, K8S_POD_NAME, K8S_POD_INFRACONTAINER_ID,
    K8S_POD_UID...); `capability_args` (portMappings, bandwidth, ...) reach, as runtimeConfig,
    only the plugins whose "capabilities" enable the key.
    """

    container_id: str
    netns: str
    ifname: str = "eth0"
    args: tuple[tuple[str, str], ...] = ()
    capability_args: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if not CONTAINER_ID.match(self.container_id):
            raise ValueError(f"invalid CNI container ID {self.container_id!r}: must start with a letter "
                             "or digit, then letters, digits, '_', '.' or '-'")
        validate_ifname(self.ifname)
        format_cni_args(self.args)  # fail here, not in the middle of a chain


def validate_ifname(ifname: str) -> None:
    """The kernel's rules for an interface name, as libcni checks them."""
    if not ifname:
        raise ValueError("invalid interface name '': required")
    if len(ifname) > _IFNAME_MAX:
        raise ValueError(f"invalid interface name {ifname!r}: longer than {_IFNAME_MAX} characters")
    if ifname in (".", "..") or any(c in ifname for c in "/:") or any(c.isspace() for c in ifname):
        raise ValueError(f"invalid interface name {ifname!r}: no '/', ':' or spaces, not '.' or '..'")


def format_cni_args(args: Sequence[tuple[str, str]]) -> str:
    """CNI_ARGS: "IgnoreUnknown=1;K1=V1;K2=V2".

    IgnoreUnknown=1 comes first, as container runtimes add it, so plugins that do not know
    the K8S_* keys accept them instead of failing.
    """
    pairs = [("IgnoreUnknown", "1")] if args and not any(k == "IgnoreUnknown" for k, _ in args) else []
    for key, value in args:
        if not key or any(c in key for c in "=;") or ";" in value:
            raise ValueError(f"invalid CNI_ARGS pair {key!r}={value!r}: keys must be non-empty without "
                             "'=' or ';', values without ';'")
        pairs.append((key, value))
    return ";".join(f"{k}={v}" for k, v in pairs)


def plugin_request(name: str, cni_version: str, plugin: Mapping[str, Any],
                   capability_args: Mapping[str, Any] | None = None,
                   prev_result: Mapping[str, Any] | None = None) -> dict:
    """The config one plugin of a chain gets on stdin for ADD, DEL or CHECK.

    The network's name and version are injected; runtimeConfig holds the capability args the
    plugin declares (and only those); prevResult is set when given; "capabilities" itself is
    removed, as the spec requires. Every other field passes through unchanged.
    """
    request = copy.deepcopy(dict(plugin))
    request.pop("capabilities", None)
    request["name"] = name
    request["cniVersion"] = cni_version
    declared = plugin.get("capabilities") or {}
    runtime_config = {key: copy.deepcopy(value) for key, value in (capability_args or {}).items()
                      if declared.get(key) is True}
    if runtime_config:
        request["runtimeConfig"] = runtime_config
    else:
        request.pop("runtimeConfig", None)
    if prev_result is not None:
        request["prevResult"] = copy.deepcopy(dict(prev_result))
    else:
        request.pop("prevResult", None)
    return request


def gc_request(name: str, cni_version: str, plugin: Mapping[str, Any],
               valid: Sequence[Attachment]) -> dict:
    """The config for GC: the plugin's, with the attachments that are still valid."""
    request = copy.deepcopy(dict(plugin))
    request.pop("capabilities", None)
    request["name"] = name
    request["cniVersion"] = cni_version
    attachments = [{"containerID": a.container_id, "ifname": a.ifname} for a in valid]
    request["cni.dev/valid-attachments"] = attachments
    # An earlier draft of the 1.1 spec named the key this way; libcni sends both.
    request["cni.dev/attachments"] = copy.deepcopy(attachments)
    return request


def status_request(name: str, cni_version: str, plugin: Mapping[str, Any]) -> dict:
    request = copy.deepcopy(dict(plugin))
    request.pop("capabilities", None)
    request["name"] = name
    request["cniVersion"] = cni_version
    return request


def plugin_env(command: str, bin_dirs: Sequence[str], attachment: Attachment | None = None) -> dict[str, str]:
    """The CNI_* variables of one exec (GC, STATUS and VERSION have no attachment)."""
    env = {"CNI_COMMAND": command, "CNI_PATH": ":".join(bin_dirs)}
    if attachment is not None:
        env.update({
            "CNI_CONTAINERID": attachment.container_id,
            "CNI_NETNS": attachment.netns,
            "CNI_IFNAME": attachment.ifname,
            "CNI_ARGS": format_cni_args(attachment.args),
        })
    return env
