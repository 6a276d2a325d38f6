"""Stale UDP flows: after a UDP Service's endpoints change, kube-proxy's conntrack reconciliation.

UDP has no connection for NAT to follow: conntrack keeps sending a client's datagrams to the
endpoint it picked first, even after that endpoint is gone, for as long as datagrams keep coming.
So after a sync that changed a UDP Service port's endpoints, every UDP flow whose original
destination is one of the port's addresses (cluster IP, external and load balancer IPs:port, or
its NodePort) and whose reply does not come from one of its serving endpoints is deleted; the
next datagram is NATed afresh. TCP needs none of this: a dead endpoint resets its connections.
"""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Iterable

from pykubelet.proxy import metrics
from pykubelet.proxy.model import ServicePort, ServicePortName
from pykubelet.util.log import get_logger

log = get_logger(__name__)

Flow = tuple[str, int, str, int]  # original destination ip, port; reply source ip, port


def serving(port: ServicePort) -> set[str]:
    return {str(ep) for ep in port.endpoints if ep.serving}


def udp_changed(before: dict[ServicePortName, ServicePort], after: dict[ServicePortName, ServicePort]) -> bool:
    """Some UDP Service port's serving endpoints changed between two syncs."""
    for name in before.keys() | after.keys():
        old, new = before.get(name), after.get(name)
        if name.protocol == "UDP" and (serving(old) if old else set()) != (serving(new) if new else set()):
            return True
    return False


def stale(ports: Iterable[ServicePort], flows: Iterable[Flow]) -> list[int]:
    """The indexes of the flows to delete."""
    by_address: dict[str, set[str]] = {}
    by_node_port: dict[int, set[str]] = {}
    for port in ports:
        endpoints = serving(port)
        if port.protocol != "udp" or not endpoints:
            continue
        for ip in (port.cluster_ip, *port.load_balancer_ips, *port.external_ips):
            by_address[f"{ip}:{port.port}"] = endpoints
        if port.node_port:
            by_node_port[port.node_port] = endpoints
    out = []
    for i, (dst, dport, src, sport) in enumerate(flows):
        reply = f"{src}:{sport}"
        wanted = by_address.get(f"{dst}:{dport}")
        if wanted is None:
            wanted = by_node_port.get(dport)
        if wanted is not None and reply not in wanted:
            out.append(i)
    return out


def _clean(ports: list[ServicePort]) -> int:
    from pyroute2 import Conntrack
    from pyroute2.conntrack import NFCTAttrTuple

    with Conntrack() as ct:
        entries = list(ct.dump_entries(tuple_orig=NFCTAttrTuple(proto=socket.IPPROTO_UDP)))
        flows = [(e.tuple_orig.daddr, e.tuple_orig.dport, e.tuple_reply.saddr, e.tuple_reply.sport) for e in entries]
        deleted = 0
        for i in stale(ports, flows):
            try:
                ct.delete(entries[i])
                deleted += 1
            except OSError:  # gone meanwhile
                pass
        return deleted


async def clean_stale_udp(ports: list[ServicePort]) -> None:
    started = time.monotonic()
    try:
        deleted = await asyncio.to_thread(_clean, ports)
    except OSError as e:
        log.warning("Cannot clear stale UDP conntrack entries", err=str(e))
        return
    metrics.CONNTRACK_DURATION.labels(metrics.IP_FAMILY).observe(time.monotonic() - started)
    metrics.CONNTRACK_DELETED.labels(metrics.IP_FAMILY).inc(deleted)
    if deleted:
        log.info("Cleared stale UDP conntrack entries", entries=deleted)
