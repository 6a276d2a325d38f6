"""The pod network: NetworkReady, the CNI config containerd loads and the plugins it names, the
agent's CNI socket (agent mode), the podCIDR, and the bridge and routes the agent keeps.

"container runtime network not ready: NetworkReady=false ... cni plugin not initialized" is the
NotReady cause people meet most; this says which of its parts is missing.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
from typing import Any, NamedTuple

from pykubelet.cni.config import ConfigError, load_conflist
from pykubelet.config import STANDALONE_POD_CIDR
from pykubelet.diagnose.checks import FAIL, OK, WARN, Node
from pykubelet.diagnose.doctor_runtime import answers
from pykubelet.network import assets
from pykubelet.network.hostnet import RTPROT_PYKUBELET, netns_path, routes_to_other_nodes
from pykubelet.network.runtime_config import Conflict, RuntimeConfig, conflict, read_runtime_config
from pykubelet.util.netns import iproute

AREA = "Network"


def _containerd_cni(info: dict[str, Any]) -> tuple[str, list[str]]:
    """The CNI conf dir and plugin dirs containerd itself uses (its verbose Status), if it said."""
    cni = (info.get("config") or {}).get("cni") or {} if isinstance(info.get("config"), dict) else {}
    dirs = cni.get("binDirs") or ([cni["binDir"]] if cni.get("binDir") else [])
    return cni.get("confDir", ""), dirs


def _find(plugin: str, dirs: list[str]) -> str:
    return next((os.path.join(d, plugin) for d in dirs if os.access(os.path.join(d, plugin), os.X_OK)), "")


def _network_ready(node: Node) -> None:
    status = node.runtime_status
    if status is None:
        return
    condition = next((c for c in status.status.conditions if c.type == "NetworkReady"), None)
    if condition is None or condition.status:
        node.add(AREA, OK, "NetworkReady=true: containerd can give pods a network")
        return
    evidence = [f"containerd: {node.runtime_info['lastCNILoadStatus']}"] if node.runtime_info.get("lastCNILoadStatus") \
        else []
    agent = (node.agent or {}).get("network") or {}
    if agent.get("problem"):
        evidence.append(f"the agent: {agent['problem']}")
    evidence.append("the node reports Ready=False: container runtime network not ready")
    node.add(AREA, FAIL, f"NetworkReady=false ({condition.reason}: {condition.message})", evidence,
             f"pykubelet cri info -r {node.settings.runtime.endpoint}")


class CNIConfigSeen(NamedTuple):
    types: list[str]
    """The plugin types of the config containerd uses."""
    foreign: bool
    """Another network's config is in charge of a node whose network the agent owns."""


def _cni_config(node: Node) -> CNIConfigSeen:
    """Check containerd's CNI config: the file it uses (the first by name), and its plugins."""
    net = node.settings.network
    conf_dir, bin_dirs = _containerd_cni(node.runtime_info)
    conf_dir = conf_dir or net.cni_conf_dir
    writes = net.mode == "agent" or net.write_runtime_config
    if writes and os.path.realpath(conf_dir) != os.path.realpath(net.cni_conf_dir):
        node.add(AREA, FAIL, f"containerd reads its CNI config from {conf_dir}, but the agent writes it to "
                             f"{net.cni_conf_dir}", ["give the agent --cni-conf-dir " + conf_dir],
                 f"pykubelet cri info -r {node.settings.runtime.endpoint}")
    try:
        config = read_runtime_config(conf_dir)
    except OSError as e:
        names, missing = [], e.strerror
    else:
        names, missing = list(config.files), ("it is empty" if os.path.isdir(conf_dir)
                                                 else os.strerror(errno.ENOENT))
    if not names:
        who = ("the agent writes 10-pykubelet.conflist there once its CNI socket answers"
               + (": it is not running (see Agent)" if node.agent is None else "") if net.mode == "agent"
               else "the agent writes it (--cni-write-config)" if writes
               else "a CNI DaemonSet (flannel, calico...) writes it when it runs on this node")
        node.add(AREA, FAIL, f"no CNI config in {conf_dir} ({missing})", [who], f"ls -l {conf_dir}")
        return CNIConfigSeen([], False)
    first, foreign = config.path, conflict(config, net)
    if foreign is not None:
        _foreign_config(node, config, foreign)
        return CNIConfigSeen([], True)
    try:
        network = load_conflist(first)
    except ConfigError as e:
        node.add(AREA, FAIL, f"the CNI config containerd loads is not valid: {e}",
                 [f"containerd uses the first file by name: {', '.join(names)}"], f"cat {first}")
        return CNIConfigSeen([], False)
    types = [p.get("type", "?") for p in network.plugins]
    node.add(AREA, OK, f"CNI config {first}: network {network.name!r}, plugins {' → '.join(types)}",
             [f"other files (not used): {', '.join(names[1:])}"] if names[1:] else [])
    dirs = bin_dirs or net.cni_bin_dirs
    missing_plugins = [t for t in ("loopback", *types) if not _find(t, dirs)]
    if net.mode == "agent":  # the chain the agent itself runs for the shim
        chain = [p["type"] for p in assets.render("pod-network.conflist", bridge="", pod_cidr="",
                                                  ipam_dir="")["plugins"]] + ["host-local"]
        missing_plugins += [f"{t} (run by the agent)" for t in chain if not _find(t, net.cni_bin_dirs)]
    if missing_plugins:
        node.add(AREA, FAIL, f"CNI plugins missing: {', '.join(missing_plugins)}",
                 [f"searched {', '.join(dirs)}" + (f" and {', '.join(net.cni_bin_dirs)}" if net.mode == "agent" else "")],
                 f"ls {' '.join(dirs)}")
    else:
        node.add(AREA, OK, f"CNI plugins present in {', '.join(dirs)}")
    return CNIConfigSeen(types, False)


def _foreign_config(node: Node, config: RuntimeConfig, foreign: Conflict) -> None:
    """Another network's config in charge of a node whose network the agent owns: a CNI DaemonSet
    (flannel...) took new pods over, and the agent stands back (docs/network.md)."""
    try:
        network = load_conflist(config.path)
        pods = (f"{config.in_charge}: network {network.name!r}, plugins "
                f"{' → '.join(p.get('type', '?') for p in network.plugins)}: new pods get that network, which "
                "the agent neither tracks nor routes")
    except ConfigError as e:
        pods = f"it is not valid ({e}): containerd gives new pods no network at all"
    node.add(AREA, FAIL, f"{config.path} is the CNI config containerd uses, not the agent's {assets.CONFLIST_NAME}",
             [f"containerd uses only the first file by name: {', '.join(config.files)}",
              pods,
              "the agent leaves the node's routes alone and reports the node NotReady while it is there",
              f"fix: {foreign.fix}"], f"ls -l {config.conf_dir}")


def _shim_socket(node: Node) -> None:
    path = node.settings.network.socket
    if not os.path.exists(path):
        why = "does not exist"
    else:
        refused = answers(path)
        why = f"does not answer ({refused.lower()})" if refused else ""
    if why:
        node.add(AREA, FAIL, f"the agent's CNI socket {path} {why}: containerd cannot set up pod networks",
                 ["agent mode: the pykubelet-cni plugin hands every ADD to the agent on this socket"]
                 + (["the agent is not running (see Agent)"] if node.agent is None else []),
                 "pgrep -af pykubelet")
    else:
        node.add(AREA, OK, f"the agent answers its CNI plugin on {path}")


def _pod_cidr(node: Node) -> str:
    s = node.settings
    if not s.cluster.kubeconfig:
        cidr = s.network.pod_cidr or STANDALONE_POD_CIDR
        node.add(AREA, OK, f"podCIDR {cidr} (standalone: {'--pod-cidr' if s.network.pod_cidr else 'the default'})")
        return cidr
    if node.node_object is None:
        return ""  # the API server checks say why it could not be read
    cidr = (node.node_object.get("spec") or {}).get("podCIDR", "")
    if not cidr:
        node.add(AREA, FAIL, "the Node has no spec.podCIDR: pods get no IP",
                 ["the controller-manager gives each Node one with --allocate-node-cidrs --cluster-cidr"],
                 f"kubectl get node {s.node_name} -o jsonpath='{{.spec.podCIDR}}'")
    else:
        node.add(AREA, OK, f"podCIDR {cidr} (the Node's spec.podCIDR)")
    return cidr


async def _host_network(node: Node, pod_cidr: str, judge_routes: bool = True) -> None:
    """The pod bridge, and the routes to other nodes' podCIDRs (when the agent owns routing)."""
    net = node.settings.network
    async with await iproute(netns_path(net.host_netns)) as ip:
        index = await ip.link_lookup(ifname=net.bridge)
        link = (await ip.link("get", index=index[0]))[0] if index else None
        addresses = [a async for a in await ip.addr("dump", index=index[0])] if index else []
        routes = [r async for r in await ip.route("dump", family=2, table=254, proto=RTPROT_PYKUBELET)]
    if link is None:
        node.add(AREA, OK, f"bridge {net.bridge} not created yet: the bridge plugin makes it with the first pod")
    else:
        ips = [f"{a.get('address')}/{a['prefixlen']}" for a in addresses if a["family"] == socket.AF_INET]
        inside = any(ipaddress.ip_interface(i).ip in ipaddress.ip_network(pod_cidr) for i in ips) if pod_cidr else True
        node.add(AREA, OK if inside else WARN,
                 f"bridge {net.bridge} is {link.get('state')}, gateway {', '.join(ips) or 'none'}"
                 + ("" if inside else f" (not in the podCIDR {pod_cidr})"), more=f"ip addr show {net.bridge}")
    if not judge_routes or node.nodes is None or not node.node_object:
        return
    wanted, _ = routes_to_other_nodes(node.settings.node_name, node.node_object, node.nodes)
    ours = {f"{r.get('dst')}/{r['dst_len']}": r.get("gateway") for r in routes}
    missing = [f"{cidr} via {gateway}" for cidr, gateway in wanted.items() if ours.get(cidr) != gateway]
    more = f"ip route show proto {RTPROT_PYKUBELET}"
    if missing:
        node.add(AREA, FAIL, f"routes to other nodes' pods missing: {', '.join(missing)}",
                 [f"the agent adds one per Node with a podCIDR and an InternalIP (route protocol {RTPROT_PYKUBELET})"],
                 more)
    else:
        node.add(AREA, OK, f"routes to the podCIDRs of the {len(wanted)} other node{'s' if len(wanted) != 1 else ''} "
                           "in place", more=more)


async def check(node: Node) -> None:
    _network_ready(node)
    seen = _cni_config(node)
    if node.settings.network.mode == "agent":
        _shim_socket(node)
    cidr = _pod_cidr(node)
    if node.settings.network.mode == "agent" or node.settings.network.write_runtime_config:
        try:
            # While another network is in charge the agent leaves the routes alone: not judged then.
            await _host_network(node, cidr, judge_routes=not seen.foreign)
        except OSError as e:
            node.add(AREA, WARN, f"cannot read the host network: {e}", more="ip route")
