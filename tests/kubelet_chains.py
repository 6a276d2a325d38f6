"""The iptables chains a real kubelet makes in the network namespace it runs in, so that a test
or benchmark that starts one there can remove what it made once the kubelet has stopped.

At start the kubelet (v1.36, pkg/kubelet/kubelet_network_linux.go) makes, for IPv4 and IPv6:
KUBE-IPTABLES-HINT in mangle (tells kube-proxy which iptables backend is in use), a
KUBE-KUBELET-CANARY chain in mangle, nat and filter (it watches them to notice a flush), and for
IPv4 KUBE-FIREWALL in filter, jumped to from INPUT and OUTPUT, dropping packets to 127.0.0.0/8
from other addresses. It never removes them; nothing on this machine needs them once it is gone.

Usage: `made = absent()` before starting the kubelet; `remove(made)` after it has exited (a
running kubelet puts its canaries back). Chains that were there before were someone else's.
"""

from __future__ import annotations

import shlex
import subprocess

CHAINS = (("mangle", "KUBE-IPTABLES-HINT"), ("mangle", "KUBE-KUBELET-CANARY"), ("nat", "KUBE-KUBELET-CANARY"),
          ("filter", "KUBE-KUBELET-CANARY"), ("filter", "KUBE-FIREWALL"))
BINARIES = ("iptables", "ip6tables")

Chain = tuple[str, str, str]  # (binary, table, chain)


def _rules(binary: str, table: str) -> list[str]:
    result = subprocess.run([binary, "-w", "-t", table, "-S"], capture_output=True, text=True)
    return result.stdout.splitlines() if result.returncode == 0 else []


def present() -> set[Chain]:
    """The kubelet's chains that exist in this network namespace now."""
    found = set()
    for binary in BINARIES:
        for table in {t for t, _ in CHAINS}:
            declared = {line.split()[1] for line in _rules(binary, table) if line.startswith("-N ")}
            found |= {(binary, table, chain) for t, chain in CHAINS if t == table and chain in declared}
    return found


def absent() -> set[Chain]:
    """The kubelet's chains that do not exist now: those a kubelet started next would make."""
    every = {(binary, table, chain) for binary in BINARIES for table, chain in CHAINS}
    return every - present()


def remove(chains: set[Chain]) -> None:
    """Remove these chains where they exist, with the jumps to them from other chains."""
    for binary, table, chain in sorted(chains & present()):
        for rule in _rules(binary, table):
            words = shlex.split(rule)
            if words[0] == "-A" and words[1] != chain and words[-2:] == ["-j", chain]:
                subprocess.run([binary, "-w", "-t", table, "-D", *words[1:]], capture_output=True)
        subprocess.run([binary, "-w", "-t", table, "-F", chain], capture_output=True)
        subprocess.run([binary, "-w", "-t", table, "-X", chain], capture_output=True)
