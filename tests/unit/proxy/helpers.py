"""Service ports and endpoints for the proxy's unit tests, in a line each."""

from __future__ import annotations

from pykubelet.proxy.model import Endpoint, ServiceName, ServicePort, ServicePortName


def ep(ip: str, port: int = 80, *, local: bool = False, ready: bool = True, serving: bool | None = None,
       terminating: bool = False) -> Endpoint:
    return Endpoint(ip, port, local, ready, ready if serving is None else serving, terminating)


def svc(name: str = "svc1", namespace: str = "ns1", port_name: str = "p80", cluster_ip: str = "10.20.30.41",
        port: int = 80, endpoints: tuple[Endpoint, ...] = (), protocol: str = "TCP", **fields) -> ServicePort:
    return ServicePort(ServicePortName(ServiceName(namespace, name), port_name, protocol), cluster_ip, port,
                       endpoints=tuple(endpoints), **fields)
