"""The IPVS mode's ipsets in the kernel, through pyroute2's ipset netlink socket.

kube-proxy runs the `ipset` command; we talk netlink instead (pyroute2 is already the agent's
netlink library): Debian's `ipset` package is not installed on a node by default (nor on this
project's VM image), and netlink needs no extra tool, no text parsing and no process per sync.
Entries keep ipset's own spelling (`10.96.0.1,tcp:443`, `10.244.1.5,udp:53,10.244.1.5`,
`30080`), the same as `ipset list` and kube-proxy print them.
"""

from __future__ import annotations

import socket
from typing import Any

from pyroute2.ipset import AsyncIPSet, PortEntry

from pykubelet.proxy.ipvs_diff import member_changes
from pykubelet.proxy.ipvs_rules import IPSETS

PROTOCOLS = {"tcp": socket.IPPROTO_TCP, "udp": socket.IPPROTO_UDP, "sctp": socket.IPPROTO_SCTP}
PROTOCOL_NAMES = {number: name for name, number in PROTOCOLS.items()}
ETYPES = {"hash:ip": "ip", "hash:ip,port": "ip,port", "hash:ip,port,ip": "ip,port,ip",
          "hash:ip,port,net": "ip,port,net", "bitmap:port": "port"}
HASH_SIZE, MAX_ELEMENTS, PORT_RANGE = 1024, 65536, (0, 65535)  # kube-proxy's set parameters
ERR_NOT_ADDED, ENOENT = 4103, 2  # IPSET_ERR_EXIST on a delete: the entry was not there


def entry_value(set_type: str, entry: str) -> tuple[Any, str]:
    """An entry in ipset's spelling -> (pyroute2's entry, its etype)."""
    etype = ETYPES[set_type]
    if etype == "port":
        return int(entry), etype
    if etype == "ip":
        return entry, etype
    ip, proto_port, *rest = entry.split(",")
    proto, port = proto_port.split(":")
    return (ip, PortEntry(int(port), PROTOCOLS[proto]), *rest), etype


def _ip(attr: Any) -> str:
    return attr.get_attr("IPSET_ATTR_IPADDR_IPV4") if attr is not None else ""


def entry_text(set_type: str, data: Any) -> str:
    """A listed entry (an IPSET_ATTR_DATA) -> ipset's spelling."""
    etype = ETYPES[set_type]
    if etype == "port":
        return str(data.get_attr("IPSET_ATTR_PORT_FROM"))
    ip = _ip(data.get_attr("IPSET_ATTR_IP_FROM"))
    if etype == "ip":
        return ip
    text = f"{ip},{PROTOCOL_NAMES.get(data.get_attr('IPSET_ATTR_PROTO'), '?')}:{data.get_attr('IPSET_ATTR_PORT_FROM')}"
    if etype == "ip,port,ip":
        return f"{text},{_ip(data.get_attr('IPSET_ATTR_IP2'))}"
    if etype == "ip,port,net":
        cidr = data.get_attr("IPSET_ATTR_CIDR2")
        return f"{text},{_ip(data.get_attr('IPSET_ATTR_IP2'))}" + (f"/{cidr}" if cidr not in (None, 32) else "")
    return text


async def _members(ipset: AsyncIPSet) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    async for msg in await ipset.list():
        name = msg.get_attr("IPSET_ATTR_SETNAME")
        if name not in IPSETS:
            continue
        entries = out.setdefault(name, set())  # a big set is listed in several messages
        adt = msg.get_attr("IPSET_ATTR_ADT")
        for data in adt.get_attrs("IPSET_ATTR_DATA") if adt is not None else ():
            entries.add(entry_text(IPSETS[name][0], data))
    return out


async def sync(want: dict[str, set[str]], have: dict[str, set[str]] | None) -> dict[str, set[str]]:
    """Make our sets hold `want` (every set is created, empty ones too: the rules name them all).
    have=None: read the kernel's members first (a full sync). Returns what the sets now hold."""
    async with AsyncIPSet() as ipset:
        if have is None:
            for name, (set_type, _) in IPSETS.items():
                kind = {"bitmap_ports_range": PORT_RANGE} if set_type == "bitmap:port" else {
                    "hashsize": HASH_SIZE, "maxelem": MAX_ELEMENTS}
                await ipset.create(name, stype=set_type, exclusive=False, **kind)
            have = await _members(ipset)
        add, delete = member_changes(want, have)
        for name, entries in delete.items():
            for entry in entries:
                value, etype = entry_value(IPSETS[name][0], entry)
                try:
                    await ipset.delete(name, value, etype=etype)
                except Exception as e:  # noqa: BLE001 - pyroute2 raises its own error types
                    if getattr(e, "code", None) != ERR_NOT_ADDED:
                        raise
        for name, entries in add.items():
            for entry in entries:
                value, etype = entry_value(IPSETS[name][0], entry)
                await ipset.add(name, value, etype=etype, exclusive=False)
    return {name: set(want.get(name, ())) for name in IPSETS}


async def destroy() -> list[str]:
    """Destroy our sets (after the rules that match them are gone); the ones that were there."""
    destroyed = []
    async with AsyncIPSet() as ipset:
        for name in IPSETS:
            try:
                await ipset.destroy(name)
                destroyed.append(name)
            except Exception as e:  # noqa: BLE001
                if getattr(e, "code", None) != ENOENT:
                    raise
    return destroyed
