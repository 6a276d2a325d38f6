"""Settings from kubelet-compatible flags and a KubeletConfiguration file.

Precedence is the kubelet's: built-in defaults < the --config file < command-line flags.
Invalid values raise ConfigError naming the flag or the file and field (the CLI exits 2).
Kubelet flags and fields that pykubelet does not implement yet are accepted with a warning.
Every setting is one row of `options.OPTIONS`; the parser and the loader below are built from it.
"""

from __future__ import annotations

import argparse
import os
import socket
from typing import Any

import yaml

from pykubelet.config import values
from pykubelet.config.options import OPTIONS, OPTIONS_BY_FIELD, UNIMPLEMENTED_FIELDS, UNIMPLEMENTED_FLAGS, Option
from pykubelet.config.settings import (NETWORK_MODES, STANDALONE_POD_CIDR, AuthnSettings, AuthzSettings,
                                       ClusterSettings, NetworkSettings, PodSettings, RuntimeSettings,
                                       ServerSettings, Settings)
from pykubelet.util.log import get_logger

__all__ = [
    "AuthnSettings", "AuthzSettings",
    "CONFIG_API_VERSION", "CONFIG_KIND", "ConfigError", "NETWORK_MODES", "STANDALONE_POD_CIDR", "ClusterSettings",
    "NetworkSettings", "PodSettings", "RuntimeSettings", "ServerSettings", "Settings", "UNIMPLEMENTED_FIELDS",
    "UNIMPLEMENTED_FLAGS", "build_parser", "load_config_file", "settings_from_args",
]

log = get_logger(__name__)

CONFIG_API_VERSION = "kubelet.config.k8s.io/v1beta1"
CONFIG_KIND = "KubeletConfiguration"


class ConfigError(ValueError):
    """A setting that cannot be used; the message names where it came from."""


def _assign(settings: Settings, option: Option, value: Any) -> None:
    *groups, attr = option.target.split(".")
    owner: Any = settings
    for group in groups:
        owner = getattr(owner, group)
    setattr(owner, attr, value)


_NESTED = {field.rsplit(".", 1)[0] for field in OPTIONS_BY_FIELD if "." in field}
_GROUPS = {prefix for field in _NESTED for prefix in
           (".".join(field.split(".")[:i]) for i in range(1, field.count(".") + 2))}


def _fields(doc: dict[str, Any], prefix: str = "") -> Any:
    """(dotted field, value) for every setting in the file: groups such as authentication.webhook
    are walked into, so each leaf is looked up on its own (authentication.webhook.cacheTTL)."""
    for key, value in doc.items():
        name = f"{prefix}{key}"
        if name in _GROUPS and isinstance(value, dict):
            yield from _fields(value, name + ".")
        else:
            yield name, value


def load_config_file(path: str, settings: Settings) -> None:
    """Apply a KubeletConfiguration YAML/JSON file onto settings."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the kubelet config file: {e.strerror}") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from e
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: must be a {CONFIG_KIND} object")
    if doc.get("apiVersion") != CONFIG_API_VERSION or doc.get("kind") != CONFIG_KIND:
        raise ConfigError(
            f"{path}: field apiVersion/kind: must be {CONFIG_API_VERSION}/{CONFIG_KIND}, "
            f"got {doc.get('apiVersion')!r}/{doc.get('kind')!r}")
    base = os.path.dirname(os.path.abspath(path))
    for key, value in _fields(doc):
        if key in ("apiVersion", "kind"):
            continue
        option = OPTIONS_BY_FIELD.get(key)
        if option is not None:
            try:
                parsed = option.parse(value)
            except ValueError as e:
                raise ConfigError(f"{path}: field {key}: {e}") from e
            if option.file_relative and parsed and not os.path.isabs(parsed):
                parsed = os.path.join(base, parsed)
            _assign(settings, option, parsed)
        elif key in UNIMPLEMENTED_FIELDS:
            log.warning("Kubelet config field not implemented by pykubelet yet; ignored", file=path, field=key)
        else:
            log.warning("Unknown kubelet config field; ignored", file=path, field=key)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pykubelet",
        description="A small kubelet-like node agent. Without --kubeconfig it runs standalone: "
                    "static Pods from --pod-manifest-path only.",
    )
    p.add_argument("--config", help="path to a KubeletConfiguration file")
    for option in OPTIONS:
        if option.flag:
            # Values stay text here: settings_from_args parses them so errors name the flag.
            # Boolean flags may be given bare (--anonymous-auth), as Go's flag package allows.
            bare = {"nargs": "?", "const": "true"} if option.parse is values.boolean else {}
            p.add_argument(f"--{option.flag}", *option.aliases, dest=option.dest, help=option.help or None, **bare)
    for name in UNIMPLEMENTED_FLAGS:
        p.add_argument(f"--{name}", nargs="?", const="true", help=argparse.SUPPRESS)
    return p


def _flag_value(option: Option, text: str) -> Any:
    try:
        raw = option.flag_type(text) if option.flag_type else text
    except ValueError:
        raise ValueError(f"must be a number, got {text!r}") from None
    return option.parse(raw)


def settings_from_args(args: argparse.Namespace) -> Settings:
    settings = Settings()
    if args.config:
        load_config_file(args.config, settings)
    for option in OPTIONS:
        text = getattr(args, option.dest, None) if option.flag else None
        if text is None:
            continue
        try:
            _assign(settings, option, _flag_value(option, text))
        except ValueError as e:
            raise ConfigError(f"flag --{option.flag}: {e}") from e
    for name in UNIMPLEMENTED_FLAGS:
        if getattr(args, name.replace("-", "_")) is not None:
            log.warning("Kubelet flag not implemented by pykubelet yet; ignored", flag=f"--{name}")
    settings.node_name = (settings.node_name.strip() or socket.gethostname()).lower()
    if settings.pods.static_pod_path:
        settings.pods.static_pod_path = os.path.abspath(settings.pods.static_pod_path)
    if settings.cluster.kubeconfig:
        settings.cluster.kubeconfig = os.path.abspath(settings.cluster.kubeconfig)
    return settings
