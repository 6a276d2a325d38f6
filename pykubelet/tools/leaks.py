"""`pykubelet leaks`: everything on a node that a pod held and that outlived the pod.

A pod exists on the node as long as its CRI sandbox does; what it holds is keyed by the
sandbox's ID (containerd's shim, the netns, the IP reservation, the agent's attachment record,
portmap's rules) or by the pod's UID (its directory and mounts under <root-dir>/pods, its
cgroups, its log directory). Each check (leak_checks.py) lists what is keyed by an ID or UID that no
sandbox has any more; a shim is matched against its own containerd's sandboxes and containers
(shim_checks.py). A Service proxy's chains and table (held by no pod) count as left behind
too. With --expect-no-pods every sandbox and container counts too: that is how
the test suites end (they must leave the machine as they found it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from dataclasses import asdict, dataclass, field

from pykubelet.cri import errors
from pykubelet.cri.client import CRIClient
from pykubelet.tools.leak_checks import (Alive, Leak, iptables_save, leaked_attachments, leaked_cgroups, leaked_ips,
                                         leaked_log_dirs, leaked_mounts, leaked_netns, leaked_pod_dirs,
                                         leaked_proxy_rules, leaked_rules, nft_tables)
from pykubelet.tools.shim_checks import Shim, orphan_shims, running_shims, socket_of


@dataclass
class Node:
    """Where one node keeps what its pods hold."""

    endpoints: list[str] = field(default_factory=lambda: ["unix:///run/containerd/containerd.sock"])
    """CRI endpoints of every containerd that runs on this machine (their pods are alive)."""
    root_dirs: list[str] = field(default_factory=lambda: ["/var/lib/kubelet"])
    pod_logs_dir: str = "/var/log/pods"
    host_netns: str = ""
    """The netns whose iptables hold the node's portmap rules; empty: this process's."""
    cgroup_roots: list[str] = field(default_factory=lambda: [""])
    """The cgroupRoot of every agent on the machine ("": pods in /kubepods)."""


async def alive_on(endpoints: list[str]) -> Alive:
    """What every reachable runtime still has; an endpoint that does not answer has nothing alive."""
    alive = Alive()
    for endpoint in endpoints:
        cri = CRIClient(endpoint)
        try:
            ids: set[str] = set()
            for s in await cri.list_pod_sandbox():
                ids.add(s.id)
                alive.sandbox_ids.add(s.id)
                alive.pod_uids.add(s.metadata.uid)
                alive.pods.append(f"{s.metadata.namespace}/{s.metadata.name} {s.id}")
                alive.netns_paths |= await _netns_of(cri, s.id)
            for c in await cri.list_containers():
                ids.add(c.id)
                alive.container_ids.add(c.id)
                alive.containers.append(f"{c.metadata.name} {c.id}")
            alive.ids_by_socket[socket_of(endpoint)] = ids
        except errors.CRIError:
            pass
        finally:
            await cri.close()
    return alive


async def _netns_of(cri: CRIClient, sandbox_id: str) -> set[str]:
    """The netns path of a sandbox, from containerd's verbose status (its OCI runtime spec)."""
    try:
        info = json.loads((await cri.pod_sandbox_status(sandbox_id, verbose=True)).info.get("info", "{}"))
    except (errors.CRIError, ValueError):
        return set()
    namespaces = info.get("runtimeSpec", {}).get("linux", {}).get("namespaces", [])
    return {ns["path"] for ns in namespaces if ns.get("type") == "network" and ns.get("path")}


def machine_endpoints(node: Node, shims: list[Shim]) -> list[str]:
    """The node's endpoints and every other containerd on the machine that still has shims:
    cgroups, netns, the log dir and the root netns' rules are shared by all of them, so what
    any of them runs is alive."""
    others = {f"unix://{shim.address}" for shim in shims if os.path.exists(shim.address)}
    return [*node.endpoints, *sorted(others - set(node.endpoints))]


async def account(node: Node, expect_no_pods: bool = False) -> list[Leak]:
    """Every leak on the node (empty: the node holds only what its live pods hold)."""
    leaks: list[Leak] = []
    if expect_no_pods:
        ours = await alive_on(node.endpoints)
        leaks += [Leak("sandbox", p.split()[0], p.split()[1]) for p in ours.pods]
        leaks += [Leak("container", c.split()[0], c.split()[1]) for c in ours.containers]
    # The shims first, then what the runtimes list: a sandbox that finishes starting in between
    # is then listed, and its shim not taken for a leak.
    shims = await asyncio.to_thread(running_shims)
    alive = await alive_on(machine_endpoints(node, shims))
    leaks += orphan_shims(shims, alive, {socket_of(e) for e in node.endpoints})
    leaks += leaked_netns(alive.netns_paths)
    for root in node.root_dirs:
        leaks += leaked_ips(alive, root) + leaked_attachments(alive, root) + leaked_pod_dirs(alive, root)
    leaks += leaked_mounts(alive)
    for cgroup_root in node.cgroup_roots:
        leaks += leaked_cgroups(alive, cgroup_root=cgroup_root)
    leaks += leaked_log_dirs(alive, node.pod_logs_dir)
    saved = await asyncio.to_thread(iptables_save, node.host_netns)
    leaks += leaked_rules(alive, saved)
    leaks += leaked_proxy_rules(saved, await asyncio.to_thread(nft_tables, node.host_netns))
    return leaks


def not_in(leaks: list[Leak], earlier: list[Leak]) -> list[Leak]:
    """The leaks that were not there before: what a run left, as opposed to what it found."""
    seen = {(leak.kind, leak.what) for leak in earlier}
    return [leak for leak in leaks if (leak.kind, leak.what) not in seen]


def report(leaks: list[Leak]) -> str:
    if not leaks:
        return "no leaks: everything on the node belongs to a live pod"
    lines = [f"{len(leaks)} leaked (held for a pod or sandbox that is gone):"]
    cgroups: dict[str, list[str]] = {}
    for leak in leaks:
        if leak.kind == "cgroup":  # one per hierarchy: say it once per pod
            cgroups.setdefault(leak.owner, []).append(leak.what)
            continue
        lines.append(f"  {leak.kind:<10}  {leak.what}" + (f"  [{leak.owner[:13]}]" if leak.owner else ""))
    for uid, paths in cgroups.items():
        lines.append(f"  {'cgroup':<10}  pod{uid} in {len(paths)} hierarchies, e.g. {paths[0]}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="pykubelet leaks", description=__doc__.split("\n\n")[0])
    p.add_argument("--container-runtime-endpoint", action="append", dest="endpoints",
                   help="CRI endpoint (repeat for every containerd on the machine)")
    p.add_argument("--root-dir", action="append", dest="root_dirs", help="agent state dir (repeatable)")
    p.add_argument("--pod-logs-dir", default="/var/log/pods")
    p.add_argument("--cgroup-root", action="append", dest="cgroup_roots",
                   help="an agent's cgroupRoot (repeatable; default: pods in /kubepods)")
    p.add_argument("--host-netns", default="", help="netns holding the node's iptables rules")
    p.add_argument("--expect-no-pods", action="store_true", help="any sandbox or container counts as a leak")
    p.add_argument("-o", "--output", choices=("text", "json"), default="text")
    args = p.parse_args(argv)
    node = Node(pod_logs_dir=args.pod_logs_dir, host_netns=args.host_netns)
    node.endpoints = args.endpoints or node.endpoints
    node.root_dirs = args.root_dirs or node.root_dirs
    node.cgroup_roots = args.cgroup_roots or node.cgroup_roots
    leaks = asyncio.run(account(node, args.expect_no_pods))
    print(json.dumps([asdict(leak) for leak in leaks], indent=2) if args.output == "json" else report(leaks))
    return 1 if leaks else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
