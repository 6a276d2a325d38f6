"""Service ports and endpoints for the proxy's unit tests, in a line each."""

from __future__ import annotations

from pyroute2.netlink.generic import ipvs as ipvs_netlink

from pykubelet.proxy.model import Endpoint, ServiceName, ServicePort, ServicePortName


def ep(ip: str, port: int = 80, *, local: bool = False, ready: bool = True, serving: bool | None = None,
       terminating: bool = False) -> Endpoint:
    return Endpoint(ip, port, local, ready, ready if serving is None else serving, terminating)


def svc(name: str = "svc1", namespace: str = "ns1", port_name: str = "p80", cluster_ip: str = "10.20.30.41",
        port: int = 80, endpoints: tuple[Endpoint, ...] = (), protocol: str = "TCP", **fields) -> ServicePort:
    return ServicePort(ServicePortName(ServiceName(namespace, name), port_name, protocol), cluster_ip, port,
                       endpoints=tuple(endpoints), **fields)


def ipvs_roundtrip(*attrs):
    """An IPVS netlink message with these attributes, encoded and decoded again as the kernel's answer would be."""
    msg = ipvs_netlink.ipvsmsg()
    msg["cmd"], msg["version"], msg["attrs"] = ipvs_netlink.IPVS_CMD_NEW_SERVICE, 1, list(attrs)
    msg.encode()
    back = ipvs_netlink.ipvsmsg(msg.data)
    back.decode()
    return back
