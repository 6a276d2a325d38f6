"""CNI network configuration lists (.conflist), and single-plugin .conf files read as a list of one.

Validation names the source and the field (`/etc/cni/net.d/x.conflist: plugins[1].type: required`)
so a bad file is fixed from the message alone. Unknown plugin fields are kept untouched: the
spec says they belong to the plugin.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any, Iterable

# The spec versions whose config and result formats we speak (0.1/0.2 results differ).
SUPPORTED_VERSIONS = ("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")

_NETWORK_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$")


class ConfigError(ValueError):
    """A network configuration is invalid: `source` is the file (or "<inline>"), `field` the path in it."""

    def __init__(self, source: str, field: str, message: str):
        self.source, self.field, self.message = source, field, message
        super().__init__(f"{source}: {field}: {message}" if field else f"{source}: {message}")


@dataclass(frozen=True)
class NetworkConfigList:
    """One network: its plugins run in order on ADD/CHECK and in reverse on DEL.

    `cni_version` is the version selected for execution: the highest of cniVersion and
    cniVersions that we support.
    """

    name: str
    cni_version: str
    plugins: tuple[dict, ...]
    source: str = "<inline>"
    disable_check: bool = False
    disable_gc: bool = False


# The files a CNI conf dir's reader (libcni, containerd) takes for network configs.
CONFIG_EXTENSIONS = (".conf", ".conflist", ".json")


def config_files(names: Iterable[str]) -> tuple[str, ...]:
    """The config files among a conf dir's file names, in the order containerd reads them; it uses
    the first only, and never falls back to a later one when that first does not load."""
    # Byte order, as Go sorts strings: a name that is not valid UTF-8 sorts by its bytes too.
    return tuple(sorted((n for n in names if n.endswith(CONFIG_EXTENSIONS)), key=os.fsencode))


def version_key(version: str) -> tuple[int, ...]:
    """"1.0.0" -> (1, 0, 0), for ordering versions; ValueError if it is not dotted numbers."""
    parts = version.split(".")
    if not 1 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"invalid version {version!r}")
    return tuple(int(p) for p in parts) + (0,) * (3 - len(parts))


def parse_conflist(data: dict | str | bytes, source: str = "<inline>") -> NetworkConfigList:
    """A network from a parsed or raw JSON object: a list with "plugins", or a single plugin."""
    if isinstance(data, (str, bytes)):
        try:
            data = json.loads(data)
        except ValueError as e:
            raise ConfigError(source, "", f"invalid JSON: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(source, "", f"must be a JSON object, not {type(data).__name__}")

    name = data.get("name")
    if name is None or name == "":
        raise ConfigError(source, "name", "required")
    if not isinstance(name, str) or not _NETWORK_NAME.match(name):
        raise ConfigError(source, "name", f"invalid network name {name!r}: must start with a letter or "
                                          "digit, then letters, digits, '_', '.' or '-'")
    version = _select_version(data, source)

    if "plugins" in data:
        raw_plugins = data["plugins"]
        if not isinstance(raw_plugins, list):
            raise ConfigError(source, "plugins", "must be a list of plugin objects")
        if not raw_plugins:
            raise ConfigError(source, "plugins", "must name at least one plugin")
        plugins = tuple(_plugin(p, source, f"plugins[{i}]") for i, p in enumerate(raw_plugins))
    elif "type" in data:
        # A single-plugin .conf: the network is that plugin alone.
        plugins = (_plugin(data, source, ""),)
    else:
        raise ConfigError(source, "plugins", "required (or \"type\" for a single-plugin .conf)")

    return NetworkConfigList(name=name, cni_version=version, plugins=plugins, source=source,
                             disable_check=_flag(data, "disableCheck", source),
                             disable_gc=_flag(data, "disableGC", source))


def load_conflist(path: str | os.PathLike[str]) -> NetworkConfigList:
    """Read and parse one .conflist or .conf file; errors name the file."""
    source = os.fspath(path)
    try:
        with open(source, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise ConfigError(source, "", f"cannot read: {e.strerror or e}") from None
    return parse_conflist(raw, source)


def _select_version(data: dict, source: str) -> str:
    version = data.get("cniVersion")
    if version is None or version == "":
        raise ConfigError(source, "cniVersion", "required")
    if not isinstance(version, str):
        raise ConfigError(source, "cniVersion", f"must be a string, not {type(version).__name__}")
    candidates = [version]
    extra = data.get("cniVersions", [])
    if not isinstance(extra, list) or not all(isinstance(v, str) for v in extra):
        raise ConfigError(source, "cniVersions", "must be a list of version strings")
    candidates += extra
    # Runtimes pick the highest version the network supports that they speak themselves.
    usable = [v for v in candidates if v in SUPPORTED_VERSIONS]
    if not usable:
        field = "cniVersion" if not extra else "cniVersions"
        raise ConfigError(source, field, f"unsupported version {version!r} "
                                         f"(supported: {', '.join(SUPPORTED_VERSIONS)})")
    return max(usable, key=version_key)


def _plugin(plugin: Any, source: str, where: str) -> dict:
    prefix = f"{where}." if where else ""
    if not isinstance(plugin, dict):
        raise ConfigError(source, where, f"must be a plugin object, not {type(plugin).__name__}")
    plugin_type = plugin.get("type")
    if plugin_type is None or plugin_type == "":
        raise ConfigError(source, f"{prefix}type", "required")
    if not isinstance(plugin_type, str) or "/" in plugin_type or plugin_type in (".", ".."):
        raise ConfigError(source, f"{prefix}type", f"invalid plugin type {plugin_type!r}: must be a file name")
    capabilities = plugin.get("capabilities", {})
    if not isinstance(capabilities, dict) or not all(isinstance(v, bool) for v in capabilities.values()):
        raise ConfigError(source, f"{prefix}capabilities", "must be an object of capability name to true/false")
    if "ipam" in plugin:
        ipam = plugin["ipam"]
        if not isinstance(ipam, dict):
            raise ConfigError(source, f"{prefix}ipam", "must be an object")
        if "type" in ipam and (not isinstance(ipam["type"], str) or "/" in ipam["type"]):
            raise ConfigError(source, f"{prefix}ipam.type", f"invalid plugin type {ipam['type']!r}")
    return dict(plugin)


def _flag(data: dict, key: str, source: str) -> bool:
    value = data.get(key, False)
    # libcni also accepts the strings "true"/"false" here; so do we.
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if not isinstance(value, bool):
        raise ConfigError(source, key, f"must be true or false, not {value!r}")
    return value
