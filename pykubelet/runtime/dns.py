"""dnsPolicy and dnsConfig -> the CRI's DNSConfig (what the pod's /etc/resolv.conf says)."""

from __future__ import annotations

from dataclasses import dataclass

from pykubelet.api.pod import Pod
from pykubelet.cri.v1 import api_pb2 as api

MAX_SEARCHES = 32  # glibc's limit since 2.26, which the kubelet follows


@dataclass(frozen=True)
class ClusterDNS:
    servers: tuple[str, ...] = ()
    """clusterDNS; empty: ClusterFirst falls back to the host's resolver, as the kubelet does."""
    domain: str = "cluster.local"
    """clusterDomain."""
    resolv_conf: str = "/etc/resolv.conf"
    """resolvConf: the host file that Default (and the fallback) copies."""


def read_resolv_conf(path: str) -> tuple[list[str], list[str], list[str]]:
    servers, searches, options = [], [], []
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError:
        return servers, searches, options
    for line in lines:
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        if fields[0] == "nameserver" and len(fields) > 1:
            servers.append(fields[1])
        elif fields[0] in ("search", "domain"):
            searches = fields[1:]
        elif fields[0] == "options":
            options.extend(fields[1:])
    return servers, searches, options


def _merge_options(base: list[str], extra: list[dict[str, str]]) -> list[str]:
    merged = {o.split(":", 1)[0]: o for o in base}
    for option in extra:
        name = option.get("name", "")
        merged[name] = f"{name}:{option['value']}" if option.get("value") is not None else name
    return list(merged.values())


def dns_config(pod: Pod, cluster: ClusterDNS) -> api.DNSConfig:
    spec = pod.raw.get("spec", {})
    policy = spec.get("dnsPolicy") or "ClusterFirst"
    if policy == "ClusterFirst" and pod.host_network:
        policy = "Default"  # host-network pods use the host's resolver unless ClusterFirstWithHostNet
    if policy in ("ClusterFirst", "ClusterFirstWithHostNet") and not cluster.servers:
        policy = "Default"
    servers: list[str] = []
    searches: list[str] = []
    options: list[str] = []
    host_servers, host_searches, host_options = read_resolv_conf(cluster.resolv_conf)
    if policy == "Default":
        servers, searches, options = host_servers, host_searches, host_options
    elif policy in ("ClusterFirst", "ClusterFirstWithHostNet"):
        servers = list(cluster.servers)
        d = cluster.domain
        searches = list(dict.fromkeys([f"{pod.namespace}.svc.{d}", f"svc.{d}", d, *host_searches]))
        options = ["ndots:5"]
    custom = spec.get("dnsConfig") or {}
    servers = list(dict.fromkeys([*servers, *(custom.get("nameservers") or [])]))  # the kubelet's omitDuplicates
    searches = list(dict.fromkeys([*searches, *(custom.get("searches") or [])]))
    options = _merge_options(options, custom.get("options") or [])
    return api.DNSConfig(servers=servers[:3], searches=searches[:MAX_SEARCHES], options=options)
