"""Which endpoints of a Service port take traffic from this node: kube-proxy's selection.

Cluster traffic goes to the ready endpoints; when none is ready anywhere, to the ones that are
serving but terminating (so a rolling update's last pods still answer). Local traffic (a `Local`
internal or external traffic policy) does the same with this node's endpoints only. Topology
hints are not applied: every ready endpoint is a cluster endpoint.
"""

from __future__ import annotations

from dataclasses import dataclass

from pykubelet.proxy.model import Endpoint, ServicePort


@dataclass(frozen=True)
class Selection:
    cluster: tuple[Endpoint, ...]
    """Endpoints for the Cluster policy (empty if the port never uses it)."""
    local: tuple[Endpoint, ...]
    """This node's endpoints for the Local policy (empty if the port never uses it)."""
    reachable: tuple[Endpoint, ...]
    """Every endpoint traffic from this node may go to: the two above, once each, sorted."""
    has_any: bool
    """Some endpoint somewhere can take traffic (even if none of it is for this node)."""


def _usable(endpoints: tuple[Endpoint, ...]) -> tuple[Endpoint, ...]:
    ready = tuple(ep for ep in endpoints if ep.ready)
    return ready or tuple(ep for ep in endpoints if ep.serving and ep.terminating)


def select(port: ServicePort) -> Selection:
    endpoints = port.endpoints
    cluster = _usable(endpoints) if port.uses_cluster_endpoints else ()
    if not port.uses_local_endpoints:
        return Selection(cluster, (), cluster, bool(cluster))
    local = _usable(tuple(ep for ep in endpoints if ep.local))
    has_any = any(ep.ready or (ep.serving and ep.terminating) for ep in endpoints)
    if not port.uses_cluster_endpoints:
        return Selection((), local, local, has_any)
    merged = {str(ep): ep for ep in (*cluster, *local)}
    return Selection(cluster, local, tuple(merged[k] for k in sorted(merged)), has_any)
