"""The proxy's settings: a KubeProxyConfiguration file (kubeproxy.config.k8s.io/v1alpha1) or
kube-proxy's flags, with kube-proxy's defaults and kube-proxy's precedence.

That precedence is not the kubelet's: with --config, the file is the whole configuration and the
other flags are ignored (kube-proxy's rule), except --hostname-override, --v and --cleanup. We
warn about each ignored flag instead of dropping it silently. Fields of the file that we do not
implement are accepted with a warning, unknown ones too (kube-proxy's lenient decoding). A bad
value raises ConfigError naming the file and field, or the flag; the command exits 2.
"""

from __future__ import annotations

import argparse
import socket
from dataclasses import dataclass, field
from typing import Any, Callable

from pykubelet.proxy import config_values as v
from pykubelet.util import scalars
from pykubelet.util.yamlfile import read_yaml

API_VERSION = "kubeproxy.config.k8s.io/v1alpha1"
KIND = "KubeProxyConfiguration"
MODES = ("iptables", "nftables", "ipvs")
HEALTHZ_PORT, METRICS_PORT = 10256, 10249
# Fields of the file we read no value from (kube-proxy's conntrack, windows... settings).
UNIMPLEMENTED_FIELDS = {"featureGates", "logging", "bindAddressHardFail", "enableProfiling", "showHiddenMetricsForVersion",
                        "ipvs.tcpTimeout", "ipvs.tcpFinTimeout", "ipvs.udpTimeout", "winkernel", "detectLocal", "oomScoreAdj", "conntrack", "configSyncPeriod", "portRange",
                        "windowsRunAsService", "clientConnection.acceptContentTypes", "clientConnection.contentType"}


class ConfigError(ValueError):
    """A setting that cannot be used; the message names the file and field, or the flag."""


@dataclass
class ProxySettings:
    kubeconfig: str = ""
    qps: float = 5.0
    burst: int = 10
    node_name: str = ""
    """--hostname-override / hostnameOverride; default: this host's name, lower case."""
    bind_address: str = "0.0.0.0"
    healthz_bind_address: str = f"0.0.0.0:{HEALTHZ_PORT}"
    """host:port of /healthz and /livez; empty: no health server."""
    metrics_bind_address: str = f"127.0.0.1:{METRICS_PORT}"
    """host:port of /metrics; empty: no metrics server."""
    mode: str = "iptables"
    masquerade_all: bool = False
    masquerade_bit: int = 14
    localhost_nodeports: bool = True
    """iptables mode: NodePorts also answer on 127.0.0.1 (sets route_localnet, as kube-proxy does)."""
    sync_period: float = 30.0
    min_sync_period: float = 1.0
    cluster_cidrs: list[str] = field(default_factory=list)
    detect_local_mode: str = "ClusterCIDR"
    """Which traffic is the pods': from clusterCIDR (ClusterCIDR) or from this node's podCIDR (NodeCIDR)."""
    nodeport_addresses: list[str] = field(default_factory=list)
    """CIDRs (or "primary") of the node addresses NodePorts answer on; empty: all of them."""
    ipvs_scheduler: str = "rr"
    ipvs_strict_arp: bool = False
    ipvs_exclude_cidrs: list[str] = field(default_factory=list)
    verbosity: int = 0
    cleanup: bool = False


# --- value parsers: each raises ValueError saying what it wanted

_bool = scalars.boolean
_duration = scalars.non_negative_duration


def _mode(value: Any) -> str:
    mode = (value or "iptables") if isinstance(value, str) else value
    if mode not in MODES:
        raise ValueError(f"must be one of {', '.join(MODES)}, got {value!r}")
    return mode


# --- the file

# field -> (attribute, parser); `{mode}` fields are read from the section of the chosen mode, `{masq}`
# ones too, except that the ipvs mode reads them from the iptables section (kube-proxy's conversion).
FILE_FIELDS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "clientConnection.kubeconfig": ("kubeconfig", str),
    "clientConnection.qps": ("qps", v.positive),
    "clientConnection.burst": ("burst", v.int_in(1, 1 << 20)),
    "hostnameOverride": ("node_name", str),
    "bindAddress": ("bind_address", v.ip),
    "healthzBindAddress": ("healthz_bind_address", v.address(HEALTHZ_PORT)),
    "metricsBindAddress": ("metrics_bind_address", v.address(METRICS_PORT)),
    "mode": ("mode", _mode),
    "clusterCIDR": ("cluster_cidrs", v.cidrs),
    "detectLocalMode": ("detect_local_mode", v.local_mode),
    "nodePortAddresses": ("nodeport_addresses", v.nodeport_addresses),
    "iptables.localhostNodePorts": ("localhost_nodeports", _bool),
    "{masq}.masqueradeAll": ("masquerade_all", _bool),
    "{masq}.masqueradeBit": ("masquerade_bit", v.int_in(0, 31)),
    "ipvs.scheduler": ("ipvs_scheduler", str),
    "ipvs.strictARP": ("ipvs_strict_arp", _bool),
    "ipvs.excludeCIDRs": ("ipvs_exclude_cidrs", v.cidrs),
    "{mode}.syncPeriod": ("sync_period", _duration),
    "{mode}.minSyncPeriod": ("min_sync_period", _duration),
}


# kubeadm writes every field of the file, the ones it leaves unset as their zero value ("", 0, a
# 0s duration, null, false), and kube-proxy's defaulting treats a zero as unset; so does this. A
# masquerade bit of 0 is a real choice (only null means unset), and false is a value for the
# booleans read here (for the ones not implemented, false is kube-proxy's default: nothing to warn).
ZERO_IS_A_VALUE = {"{masq}.masqueradeBit"}


def _zero(value: Any, false_too: bool = False) -> bool:
    if isinstance(value, dict):  # e.g. logging, which kubeadm writes as a tree of zeros
        return all(_zero(v, false_too) for v in value.values())
    if isinstance(value, bool):
        return false_too and not value
    return value is None or value in ("", "0", "0s", 0, [])


def _leaves(doc: dict[str, Any], prefix: str = "") -> Any:
    for key, value in doc.items():
        name = prefix + str(key)
        if isinstance(value, dict) and key in ("clientConnection", "iptables", "nftables", "ipvs", "winkernel",
                                               "conntrack", "detectLocal") and not prefix:
            yield from _leaves(value, name + ".")
        else:
            yield name, value


def load_file(path: str, settings: ProxySettings, warn: Callable[[str], None]) -> None:
    doc = read_yaml(path, "kube-proxy config file", ConfigError)
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: must be a {KIND} object")
    if doc.get("apiVersion") != API_VERSION or doc.get("kind") != KIND:
        raise ConfigError(f"{path}: field apiVersion/kind: must be {API_VERSION}/{KIND}, "
                          f"got {doc.get('apiVersion')!r}/{doc.get('kind')!r}")
    try:
        mode = _mode(doc.get("mode") or "iptables")
    except ValueError as e:
        raise ConfigError(f"{path}: field mode: {e}") from None
    masq = "iptables" if mode == "ipvs" else mode
    if mode == "ipvs":
        # kube-proxy's file defaults give the iptables and nftables sections a minSyncPeriod of 1s
        # and the ipvs section none: a file in IPVS mode syncs at once unless it asks otherwise
        settings.min_sync_period = 0.0
    fields = {key.replace("{mode}", mode).replace("{masq}", masq): target for key, target in FILE_FIELDS.items()}
    zero_is_a_value = {key.replace("{masq}", masq) for key in ZERO_IS_A_VALUE}
    for key, value in _leaves(doc):
        if key in ("apiVersion", "kind"):
            continue
        if key in fields:
            attr, parse = fields[key]
            if value is None or (_zero(value) and key not in zero_is_a_value):
                continue
            try:
                setattr(settings, attr, parse(value))
            except (ValueError, TypeError) as e:
                raise ConfigError(f"{path}: field {key}: {e}") from None
        elif key.split(".")[0] in MODES and key.split(".")[0] != mode:
            continue  # another mode's section: not ours to read
        elif key in UNIMPLEMENTED_FIELDS or key.split(".")[0] in UNIMPLEMENTED_FIELDS:
            if not _zero(value, false_too=True):
                warn(f"{path}: field {key} is not implemented by pykubelet proxy; ignored")
        else:
            warn(f"{path}: unknown field {key}; ignored")


# --- the flags

# flag -> (attribute, parser)
FLAGS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "kubeconfig": ("kubeconfig", str),
    "hostname-override": ("node_name", str),
    "proxy-mode": ("mode", _mode),
    "cluster-cidr": ("cluster_cidrs", v.cidrs),
    "nodeport-addresses": ("nodeport_addresses", v.nodeport_addresses),
    "masquerade-all": ("masquerade_all", _bool),
    "metrics-bind-address": ("metrics_bind_address", v.address(METRICS_PORT)),
    "healthz-bind-address": ("healthz_bind_address", v.address(HEALTHZ_PORT)),
    "bind-address": ("bind_address", v.ip),
    "detect-local-mode": ("detect_local_mode", v.local_mode),
    "iptables-sync-period": ("sync_period", _duration),
    "iptables-min-sync-period": ("min_sync_period", _duration),
    "iptables-masquerade-bit": ("masquerade_bit", v.int_in(0, 31)),
    "iptables-localhost-nodeports": ("localhost_nodeports", _bool),
    "ipvs-sync-period": ("sync_period", _duration),
    "ipvs-min-sync-period": ("min_sync_period", _duration),
    "ipvs-scheduler": ("ipvs_scheduler", str),
    "ipvs-strict-arp": ("ipvs_strict_arp", _bool),
    "ipvs-exclude-cidrs": ("ipvs_exclude_cidrs", v.cidrs),
    "kube-api-qps": ("qps", v.positive),
    "kube-api-burst": ("burst", v.int_in(1, 1 << 20)),
}
BOOLEAN_FLAGS = {"masquerade-all", "iptables-localhost-nodeports", "ipvs-strict-arp"}
# The sync period flags of the ipvs mode count in it only; the iptables ones everywhere else (kube-proxy's rule).
IPVS_ONLY = {"ipvs-sync-period": True, "ipvs-min-sync-period": True, "iptables-sync-period": False,
             "iptables-min-sync-period": False}
ALWAYS_APPLIED = {"hostname-override"}  # even with --config (kube-proxy's exception)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pykubelet proxy",
                                description="kube-proxy's job on the node: Service IPs and NodePorts to endpoints.")
    p.add_argument("--config", help="KubeProxyConfiguration file; with it, the flags below are ignored "
                                    "(as kube-proxy does) except --hostname-override")
    p.add_argument("--cleanup", action="store_true", help="remove every rule the proxy installed (all modes) and exit")
    p.add_argument("--v", "-v", type=int, default=0, help="log verbosity (4 and up: debug)")
    for flag in FLAGS:
        extra = {"nargs": "?", "const": "true"} if flag in BOOLEAN_FLAGS else {}
        p.add_argument(f"--{flag}", dest=flag.replace("-", "_"), **extra)
    return p


def settings_from_args(argv: list[str], warn: Callable[[str], None]) -> ProxySettings:
    args = build_parser().parse_args(argv)
    settings = ProxySettings(verbosity=args.v, cleanup=args.cleanup)
    given = {flag: getattr(args, flag.replace("-", "_")) for flag in FLAGS}
    given = {flag: value for flag, value in given.items() if value is not None}
    if args.config:
        load_file(args.config, settings, warn)
        for flag in sorted(given.keys() - ALWAYS_APPLIED):
            warn(f"flag --{flag} is ignored: with --config the file's value counts (as in kube-proxy)")
        given = {flag: value for flag, value in given.items() if flag in ALWAYS_APPLIED}
    for flag, text in given.items():
        if IPVS_ONLY.get(flag, settings.mode == "ipvs") != (settings.mode == "ipvs"):
            continue
        attr, parse = FLAGS[flag]
        try:
            setattr(settings, attr, parse(text))
        except ValueError as e:
            raise ConfigError(f"flag --{flag}: {e}") from None
    settings.node_name = (settings.node_name.strip() or socket.gethostname()).lower()
    if settings.min_sync_period > settings.sync_period:
        raise ConfigError(f"syncPeriod ({settings.sync_period:g}s) must not be shorter than minSyncPeriod "
                          f"({settings.min_sync_period:g}s)")
    if settings.sync_period <= 0:
        raise ConfigError("syncPeriod must be greater than 0")
    if not settings.cleanup and not settings.kubeconfig:
        raise ConfigError("--kubeconfig (or clientConnection.kubeconfig) is required: the proxy watches the apiserver")
    return settings
