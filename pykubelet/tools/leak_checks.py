"""The checks of `pykubelet leaks`, one per kind of thing a pod holds on a node.

Each takes what is alive (sandbox IDs, container IDs, pod UIDs) and lists what is held for an
ID or UID that is not; they read the machine (/proc, /sys/fs/cgroup, the agent's state dirs)
but change nothing.
"""

from __future__ import annotations

import ipaddress
import os
import re
import subprocess
from dataclasses import dataclass, field

from pykubelet.runtime import cgroups, paths

NETNS_DIR = "/var/run/netns"
# portmap tags each rule with the network name and the sandbox's ID.
POD_VOLUME_MOUNT = re.compile(r"/pods/([0-9a-f-]{36})/(?:volumes|volume-subpaths|etc-hosts)")
RUNTIME_MOUNT = re.compile(r"/(?:k8s\.io|sandboxes)/([0-9a-f]{64})/")
PORTMAP_COMMENT = re.compile(r'id: \\?"([0-9a-f]{64})\\?"')
# What a Service proxy (`pykubelet proxy`, kube-proxy) programs: its chains (iptables mode; the
# names of pykubelet/proxy/iptables_rules.py and names.py) and its table (nftables mode).
PROXY_CHAINS = {"KUBE-SERVICES", "KUBE-NODEPORTS", "KUBE-POSTROUTING", "KUBE-MARK-MASQ", "KUBE-EXTERNAL-SERVICES",
                "KUBE-FORWARD", "KUBE-PROXY-FIREWALL", "KUBE-PROXY-CANARY"}
PROXY_CHAIN_PREFIXES = ("KUBE-SVC-", "KUBE-SVL-", "KUBE-EXT-", "KUBE-FW-", "KUBE-SEP-")
PROXY_TABLE = "table ip kube-proxy"


@dataclass(frozen=True)
class Leak:
    kind: str
    """What was left: sandbox, container, shim, netns, ip, attachment, pod-dir, mount, cgroup, log-dir, rule,
    proxy-rule."""
    what: str
    """The thing itself: a path, an ID, a rule."""
    owner: str
    """The sandbox ID or pod UID it was held for."""


@dataclass
class Alive:
    sandbox_ids: set[str] = field(default_factory=set)
    container_ids: set[str] = field(default_factory=set)
    pod_uids: set[str] = field(default_factory=set)
    netns_paths: set[str] = field(default_factory=set)
    pods: list[str] = field(default_factory=list)  # "<ns>/<name> <sandbox id>", for --expect-no-pods
    containers: list[str] = field(default_factory=list)
    ids_by_socket: dict[str, set[str]] = field(default_factory=dict)
    """For each containerd that answered (by its socket's real path), the IDs of its sandboxes and
    containers: a shim is matched against its own containerd's (shim_checks.py)."""


def leaked_netns(in_use: set[str]) -> list[Leak]:
    try:
        names = os.listdir(NETNS_DIR)
    except FileNotFoundError:
        return []
    return [Leak("netns", os.path.join(NETNS_DIR, n), "") for n in sorted(names)
            if n.startswith("cni-") and os.path.join(NETNS_DIR, n) not in in_use]


def leaked_ips(alive: Alive, root_dir: str) -> list[Leak]:
    """host-local's reservations: <root>/network/ipam/<network>/<ip> holds the sandbox ID."""
    out = []
    ipam = os.path.join(root_dir, "network", "ipam")
    for network in _listdir(ipam):
        for name in _listdir(os.path.join(ipam, network)):
            try:
                ipaddress.ip_address(name)
                with open(os.path.join(ipam, network, name), encoding="utf-8") as f:
                    owner = (f.read().split() or [""])[0]
            except (ValueError, OSError):
                continue
            if owner not in alive.sandbox_ids:
                out.append(Leak("ip", f"{name} ({network})", owner))
    return out


def leaked_attachments(alive: Alive, root_dir: str) -> list[Leak]:
    directory = os.path.join(root_dir, "network", "attachments")
    return [Leak("attachment", os.path.join(directory, n), n[:-5]) for n in _listdir(directory)
            if n.endswith(".json") and n[:-5] not in alive.sandbox_ids]


def leaked_pod_dirs(alive: Alive, root_dir: str) -> list[Leak]:
    pods = paths.pods_dir(root_dir)
    return [Leak("pod-dir", os.path.join(pods, uid), uid) for uid in _listdir(pods) if uid not in alive.pod_uids]


def leaked_mounts(alive: Alive) -> list[Leak]:
    """Mounts of the machine made for a pod (its volumes, wherever its root dir is) or for a
    sandbox or container (containerd's rootfs and shm mounts) that is gone."""
    out = []
    for point in _mount_points():
        if m := POD_VOLUME_MOUNT.search(point):
            if m.group(1) not in alive.pod_uids:
                out.append(Leak("mount", point, m.group(1)))
        elif m := RUNTIME_MOUNT.search(point):
            if m.group(1) not in alive.sandbox_ids | alive.container_ids:
                out.append(Leak("mount", point, m.group(1)))
    return out


def leaked_cgroups(alive: Alive, root: str = cgroups.CGROUP_ROOT, cgroup_root: str = "") -> list[Leak]:
    """Pod cgroups of either driver's layout, in every hierarchy, under the node's cgroupRoot."""
    found = cgroups.pod_cgroups(root, cgroups.kubepods_under(cgroup_root))
    return [Leak("cgroup", path, uid) for uid, paths in sorted(found.items()) if uid not in alive.pod_uids
            for path in paths]


def leaked_log_dirs(alive: Alive, pod_logs_dir: str) -> list[Leak]:
    """/var/log/pods/<namespace>_<name>_<uid>."""
    return [Leak("log-dir", os.path.join(pod_logs_dir, n), n.rsplit("_", 1)[-1]) for n in _listdir(pod_logs_dir)
            if n.count("_") >= 2 and n.rsplit("_", 1)[-1] not in alive.pod_uids]


def leaked_rules(alive: Alive, iptables_save: str) -> list[Leak]:
    """portmap's DNAT/SNAT rules name the sandbox they were made for in a comment."""
    out = []
    for line in iptables_save.splitlines():
        m = PORTMAP_COMMENT.search(line)
        if m and line.startswith("-A") and m.group(1) not in alive.sandbox_ids:
            out.append(Leak("rule", line, m.group(1)))
    return out


def leaked_proxy_rules(iptables_save: str, nft_tables: str) -> list[Leak]:
    """A Service proxy's chains and table: no pod holds them, and a test that runs a proxy removes
    them when it is done (`pykubelet proxy --cleanup`); what is there is what it left."""
    out = []
    for line in iptables_save.splitlines():
        chain = line[1:].split(" ", 1)[0] if line.startswith(":") else ""
        if chain in PROXY_CHAINS or chain.startswith(PROXY_CHAIN_PREFIXES):
            out.append(Leak("proxy-rule", f"iptables chain {chain}", ""))
    out += [Leak("proxy-rule", "nftables " + line.strip(), "") for line in nft_tables.splitlines()
            if line.strip() == PROXY_TABLE]
    return out


def _in_netns(host_netns: str, *argv: str) -> str:
    if host_netns:
        argv = ("nsenter", f"--net={host_netns if '/' in host_netns else os.path.join(NETNS_DIR, host_netns)}", *argv)
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def iptables_save(host_netns: str) -> str:
    return _in_netns(host_netns, "iptables-save")


def nft_tables(host_netns: str) -> str:
    """`nft list tables` ("" without nft)."""
    return _in_netns(host_netns, "nft", "list", "tables")


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except (FileNotFoundError, NotADirectoryError):
        return []


def _mount_points() -> list[str]:
    with open("/proc/self/mounts", encoding="utf-8") as f:
        return [line.split()[1].replace("\\040", " ") for line in f]


