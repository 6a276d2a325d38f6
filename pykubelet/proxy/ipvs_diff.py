"""What one IPVS sync changes: the difference between the desired state and the kernel's, pure.

Virtual servers are added, changed in place (scheduler, persistence: the VIP never goes away)
or deleted; real servers are added, and removed gracefully as kube-proxy's graceful termination
manager does: a TCP real server that still has connections gets weight 0 (no new connections)
and goes on the termination list, and is deleted once its active and inactive connection counts
are both 0 (`graceful_check`, every minute); a UDP or SCTP one, or one without connections, is
deleted at once. An endpoint that comes back while on the list is deleted and added again with
weight 1. The first sync after a start puts every wanted real server back to weight 1 and
masquerading (a previous run may have left some at 0, or reached by another forwarding method).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from pykubelet.proxy.ipvs_state import DesiredState, RealServer, VirtualServer

WEIGHT = 1


@dataclass(frozen=True)
class Dest:
    """A real server as the kernel has it."""

    server: RealServer
    weight: int = WEIGHT
    active: int = 0
    inactive: int = 0
    masquerading: bool = True
    """Reached by NAT (kube-proxy's forwarding method), not direct routing or tunnelling."""


@dataclass
class KernelService:
    service: VirtualServer
    dests: dict[RealServer, Dest] = field(default_factory=dict)


Kernel = dict[str, KernelService]
"""key of a virtual server -> it and its real servers, as the kernel has them."""
Pair = tuple[VirtualServer, RealServer]


def termination_key(vs: VirtualServer, rs: RealServer) -> str:
    return f"{vs.key}/{rs}"


@dataclass
class Plan:
    add_services: list[VirtualServer] = field(default_factory=list)
    update_services: list[VirtualServer] = field(default_factory=list)
    delete_services: list[VirtualServer] = field(default_factory=list)
    delete_dests: list[Pair] = field(default_factory=list)
    """Deleted now (done before the additions: a returning endpoint is deleted, then added)."""
    add_dests: list[Pair] = field(default_factory=list)
    reweight_dests: list[Pair] = field(default_factory=list)
    """Back to weight 1 and masquerading."""
    retire_dests: list[Pair] = field(default_factory=list)
    """Removed gracefully: deleted if `deletable`, else weight 0 and onto the termination list."""

    def __bool__(self) -> bool:
        return any((self.add_services, self.update_services, self.delete_services, self.delete_dests,
                    self.add_dests, self.reweight_dests, self.retire_dests))


def graceful_needed(protocol: str) -> bool:
    """UDP and SCTP real servers are deleted at once: a datagram flow has no end to wait for."""
    return protocol.upper() not in ("UDP", "SCTP")


def deletable(vs: VirtualServer, dest: Dest) -> bool:
    return not graceful_needed(vs.protocol) or dest.active + dest.inactive == 0


def _excluded(address: str, exclude_cidrs: tuple[str, ...]) -> bool:
    ip = ipaddress.ip_address(address)
    return ip.version != 4 or any(ip in ipaddress.ip_network(c, strict=False) for c in exclude_cidrs)


def plan(desired: DesiredState, kernel: Kernel, terminating: set[str], first: bool,
         exclude_cidrs: tuple[str, ...] = ()) -> Plan:
    """The changes that make the kernel's virtual and real servers the desired ones. `terminating`:
    the termination list's keys; `first`: the first sync of this run. Virtual servers that are not
    IPv4 or are in exclude_cidrs (ipvs.excludeCIDRs) are someone else's and never deleted."""
    out = Plan()
    for key in sorted(desired.services):
        vs, want = desired.services[key], desired.destinations.get(key, frozenset())
        have = kernel.get(key)
        if have is None:
            out.add_services.append(vs)
            out.add_dests += [(vs, rs) for rs in sorted(want)]
            continue
        if have.service != vs:
            out.update_services.append(vs)
        for rs in sorted(want):
            dest = have.dests.get(rs)
            if dest is None:
                out.add_dests.append((vs, rs))
            elif termination_key(vs, rs) in terminating:
                out.delete_dests.append((vs, rs))
                out.add_dests.append((vs, rs))
            elif first and (dest.weight != WEIGHT or not dest.masquerading):
                out.reweight_dests.append((vs, rs))
        out.retire_dests += [(vs, rs) for rs in sorted(have.dests) if rs not in want
                             and termination_key(vs, rs) not in terminating]
    out.delete_services = [kernel[key].service for key in sorted(kernel.keys() - desired.services.keys())
                           if not _excluded(kernel[key].service.address, exclude_cidrs)]
    return out


def graceful_check(terminating: dict[str, Pair], kernel: Kernel) -> tuple[list[Pair], list[str]]:
    """(real servers to delete now, termination-list keys to drop): those with no connections
    left are deleted; those the kernel no longer has (their virtual server went) are dropped."""
    delete: list[Pair] = []
    drop: list[str] = []
    for key in sorted(terminating):
        vs, rs = terminating[key]
        have = kernel.get(vs.key)
        dest = have.dests.get(rs) if have is not None else None
        if dest is None:
            drop.append(key)
        elif deletable(vs, dest):
            delete.append((vs, rs))
            drop.append(key)
    return delete, drop


def member_changes(want: dict[str, set[str]], have: dict[str, set[str]]) -> tuple[dict[str, list[str]],
                                                                                  dict[str, list[str]]]:
    """(entries to add, entries to delete), per ipset."""
    add = {name: sorted(entries - have.get(name, set())) for name, entries in want.items()}
    delete = {name: sorted(entries - want.get(name, set())) for name, entries in have.items()}
    return {k: v for k, v in add.items() if v}, {k: v for k, v in delete.items() if v}


def address_changes(want: set[str], have: set[str]) -> tuple[list[str], list[str]]:
    """(addresses to bind to kube-ipvs0, addresses to remove from it)."""
    return sorted(want - have), sorted(have - want)
