"""Settings from kubelet-compatible flags and a KubeletConfiguration file.

Precedence is the kubelet's: built-in defaults < the --config file < command-line flags.
Invalid values raise ConfigError naming the flag or the file and field (the CLI exits 2).
Every setting of the real kubelet is accepted: the ones pykubelet does not act on are checked and
warned about when their value asks for something pykubelet does not do (config/ignored.py).
Every setting is one row of `options.OPTIONS`; the parser and the loader below are built from it.
"""

from __future__ import annotations

import argparse
import os
import socket
import textwrap
from typing import Any


from pykubelet import KUBELET_VERSION
from pykubelet.config import values
from pykubelet.config.node_lifecycle import check_shutdown
from pykubelet.config.options import OPTIONS, OPTIONS_BY_FIELD, UNIMPLEMENTED_FIELDS, UNIMPLEMENTED_FLAGS, Option
from pykubelet.config.settings import (NETWORK_MODES, STANDALONE_POD_CIDR, AuthnSettings, AuthzSettings,
                                       ClusterSettings, ImageGCSettings, NetworkSettings, PodSettings,
                                       RuntimeSettings, ServerSettings, Settings)
from pykubelet.util.durations import format_duration
from pykubelet.util.log import get_logger
from pykubelet.util.yamlfile import read_yaml

__all__ = [
    "AuthnSettings", "AuthzSettings",
    "CONFIG_API_VERSION", "CONFIG_KIND", "ConfigError", "NETWORK_MODES", "STANDALONE_POD_CIDR", "ClusterSettings",
    "ImageGCSettings", "NetworkSettings", "PodSettings", "RuntimeSettings", "ServerSettings", "Settings", "UNIMPLEMENTED_FIELDS",
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


def _warn_ignored(option: Option, value: Any, where: dict[str, str], warned: set[str]) -> None:
    """Once per setting: the value asks for something pykubelet does not do."""
    name = option.field or option.flag
    if name in warned or not option.asks_for_more(value):
        return
    warned.add(name)
    log.warning("Kubelet setting not implemented by pykubelet; ignored", **where, value=_shown(value),
                **({"why": option.note} if option.note else {}))


def _shown(value: Any) -> str:
    return str(value) if not isinstance(value, float) else f"{value:g}s"


def load_config_file(path: str, settings: Settings, warned: set[str] | None = None) -> None:
    """Apply a KubeletConfiguration YAML/JSON file onto settings. `warned` collects the settings
    already warned about, so a setting in several files (or a file and a flag) is named once."""
    warned = set() if warned is None else warned
    doc = read_yaml(path, "kubelet config file", ConfigError)
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: must be a {CONFIG_KIND} object")
    if doc.get("apiVersion") != CONFIG_API_VERSION or doc.get("kind") != CONFIG_KIND:
        raise ConfigError(
            f"{path}: field apiVersion/kind: must be {CONFIG_API_VERSION}/{CONFIG_KIND}, "
            f"got {doc.get('apiVersion')!r}/{doc.get('kind')!r}")
    base = os.path.dirname(os.path.abspath(path))
    given: set[str] = set()
    for key, value in _fields(doc):
        if key in ("apiVersion", "kind"):
            continue
        option = OPTIONS_BY_FIELD.get(key)
        if option is None:
            log.warning("Unknown kubelet config field; ignored", file=path, field=key)
            continue
        if option.zero_is_default and values.is_zero(value):
            continue  # the kubelet's defaulting: a zero value is the default
        try:
            parsed = option.parse(value)
        except ValueError as e:
            raise ConfigError(f"{path}: field {key}: {e}") from e
        if not option.implemented:
            _warn_ignored(option, parsed, {"file": path, "field": key}, warned)
            continue
        if option.file_relative and parsed and not os.path.isabs(parsed):
            parsed = os.path.join(base, parsed)
        _assign(settings, option, parsed)
        given.add(key)
    if "nodeStatusUpdateFrequency" in given and "nodeStatusReportFrequency" not in given:
        # The kubelet reports at least as often as it computes, when only the latter is set.
        settings.cluster.status_report_seconds = settings.cluster.status_update_seconds


class _VersionAction(argparse.Action):
    """--version as the kubelet's: `Kubernetes vX.Y.Z...` on stdout, exit 0 (kubeadm parses it)."""

    def __call__(self, parser, namespace, value, option_string=None):
        if value in (None, "true", "raw"):
            print(f"Kubernetes {KUBELET_VERSION}")
            parser.exit(0)
        if value != "false":
            parser.error(f"--version: must be true, false or raw, got {value!r}")


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's, except that the epilog's list of flags is never wrapped inside a flag's name."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return textwrap.fill(" ".join(text.split()), width, initial_indent=indent, subsequent_indent=indent,
                             break_on_hyphens=False)


def build_parser() -> argparse.ArgumentParser:
    ignored = sorted(f"--{o.flag}" for o in OPTIONS if o.flag and not o.implemented)
    p = argparse.ArgumentParser(
        prog="pykubelet", allow_abbrev=False, formatter_class=_HelpFormatter,  # a kubelet flag is spelled out; a prefix is not a flag
        description="A small kubelet-like node agent. Without --kubeconfig it runs standalone: "
                    "static Pods from --pod-manifest-path only.",
        epilog="Also accepted, as the kubelet's, and ignored with a warning when they ask for something "
               "pykubelet does not do: " + " ".join(ignored),
    )
    p.add_argument("--version", action=_VersionAction, nargs="?", help="print the version and exit")
    p.add_argument("--config", help="path to a KubeletConfiguration file")
    p.add_argument("--config-dir", help="directory of drop-in KubeletConfiguration files (*.conf, in name order) "
                                        "that override --config")
    for option in OPTIONS:
        if not option.flag:
            continue
        kwargs: dict[str, Any] = {}
        if option.parse is values.boolean:
            # Boolean flags may be given bare (--anonymous-auth), as Go's flag package allows.
            kwargs.update(nargs="?", const="true")
        if option.repeatable:
            kwargs["action"] = "append"
        # Values stay text here: settings_from_args parses them so errors name the flag.
        p.add_argument(f"--{option.flag}", *option.aliases, dest=option.dest,
                       help=_help(option), **kwargs)
    return p


def _help(option: Option) -> str | None:
    if not option.implemented:
        return argparse.SUPPRESS
    return option.help.replace("%", "%%") or None  # argparse formats help with %


def _flag_value(option: Option, text: str) -> Any:
    try:
        raw = option.flag_type(text) if option.flag_type else text
    except ValueError:
        raise ValueError(f"must be a number, got {text!r}") from None
    return option.parse(raw)


def _combined(option: Option, given: Any) -> Any:
    """The flag's value: the last one given, or for a list or map flag all of them (pflag's way)."""
    if not option.repeatable:
        return _flag_value(option, given)
    parsed = [_flag_value(option, text) for text in given]
    if all(isinstance(p, dict) for p in parsed):
        return {k: v for p in parsed for k, v in p.items()}
    return [item for p in parsed for item in p]


def _drop_ins(directory: str) -> list[str]:
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(".conf"))
    except OSError as e:
        raise ConfigError(f"{directory}: cannot read the kubelet config drop-in directory: {e.strerror}") from e
    return [os.path.join(directory, n) for n in names]


def settings_from_args(args: argparse.Namespace) -> Settings:
    settings = Settings()
    warned: set[str] = set()
    for path in ([args.config] if args.config else []) + (_drop_ins(args.config_dir) if args.config_dir else []):
        load_config_file(path, settings, warned)
    for option in OPTIONS:
        given = getattr(args, option.dest, None) if option.flag else None
        if given is None:
            continue
        try:
            value = _combined(option, given)
        except ValueError as e:
            raise ConfigError(f"flag --{option.flag}: {e}") from e
        if option.implemented:
            _assign(settings, option, value)
        else:
            _warn_ignored(option, value, {"flag": f"--{option.flag}"}, warned)
    return _finish(settings)


def _finish(settings: Settings) -> Settings:
    """What follows from the settings as given: the node's name, absolute paths, the cert dir."""
    settings.node_name = (settings.node_name.strip() or socket.gethostname()).lower()
    if settings.pods.static_pod_path:
        settings.pods.static_pod_path = os.path.abspath(settings.pods.static_pod_path)
    cluster = settings.cluster
    for attr in ("kubeconfig", "bootstrap_kubeconfig", "cert_dir"):
        if getattr(cluster, attr):
            setattr(cluster, attr, os.path.abspath(getattr(cluster, attr)))
    if cluster.bootstrap_kubeconfig and not cluster.kubeconfig:
        raise ConfigError("flag --bootstrap-kubeconfig: needs --kubeconfig, where the node's kubeconfig is written "
                          "after TLS bootstrap")
    cluster.cert_dir = settings.certificate_dir()
    if settings.server.server_tls_bootstrap and not cluster.kubeconfig:
        raise ConfigError("serverTLSBootstrap (--rotate-server-certificates): needs --kubeconfig, the cluster that "
                          "signs the serving certificate")
    _check_cgroup_root(settings)
    _check_image_gc(settings)
    _check_eviction(settings)
    if problem := check_shutdown(settings.shutdown):
        raise ConfigError(problem)
    return settings


def _check_eviction(settings: Settings) -> None:
    """Every soft threshold needs its grace period (the kubelet's ParseThresholdConfig)."""
    try:
        settings.eviction_thresholds()
    except ValueError as e:
        raise ConfigError(f"evictionSoft (--eviction-soft): {e} (evictionSoftGracePeriod, "
                          f"--eviction-soft-grace-period)") from None


def _check_image_gc(settings: Settings) -> None:
    """The kubelet's checks across the image GC settings (each alone is checked when parsed)."""
    gc = settings.image_gc
    if gc.low_threshold_percent >= gc.high_threshold_percent:
        raise ConfigError(f"imageGCLowThresholdPercent (--image-gc-low-threshold) {gc.low_threshold_percent} must be "
                          f"less than imageGCHighThresholdPercent (--image-gc-high-threshold) "
                          f"{gc.high_threshold_percent}")
    if gc.maximum_age and gc.maximum_age <= gc.minimum_age:
        raise ConfigError(f"imageMaximumGCAge {format_duration(gc.maximum_age)} must be greater than "
                          f"imageMinimumGCAge (--minimum-image-ttl-duration) {format_duration(gc.minimum_age)}")


def _check_cgroup_root(settings: Settings) -> None:
    """cgroupRoot is a cgroupfs path under either driver (the kubelet reads it so): with systemd its
    parts become the slice names' parts (/pkl-a -> pkl_a.slice/pkl_a-kubepods.slice). A part
    written as a slice (/kube.slice) would become kube.slice-kubepods.slice, never what was meant."""
    root, driver = settings.pods.cgroup_root, settings.runtime.cgroup_driver
    if driver == "systemd" and any(part.endswith(".slice") for part in root.split("/")):
        parts = [p for p in root.split("/") if p]
        last = max(i for i, p in enumerate(parts) if p.endswith(".slice"))  # a slice's name holds its parents
        path = "/" + "/".join([*parts[last].removesuffix(".slice").split("-"), *parts[last + 1:]])
        raise ConfigError(f"cgroupRoot {root!r}: with cgroupDriver systemd it is still a cgroupfs path whose "
                          f"parts name the slices (/kube puts the pods in kube.slice/kube-kubepods.slice); "
                          f"write {path!r}")
