"""The names of the per-Service chains (and nftables affinity sets), as kube-proxy makes them.

Same names as kube-proxy, so a node moving between kube-proxy and `pykubelet proxy` (and anyone
reading `iptables-save` or `nft list ruleset`) sees the familiar chains:

* iptables: a prefix (KUBE-SVC-, KUBE-SVL-, KUBE-EXT-, KUBE-FW-, KUBE-SEP-) and the first 16
  characters of base32(sha256(port name + protocol [+ endpoint])) — iptables chain names are short.
* nftables: a prefix (service-, local-, external-, firewall-, endpoint-, affinity-), 8 characters
  of the same kind of hash, and the readable name: `service-ULMVA6XW-ns/svc/tcp/http`.
"""

from __future__ import annotations

import base64
import functools
import hashlib

from pykubelet.proxy.model import Endpoint, ServicePortName

IPTABLES_SERVICE_PREFIXES = ("KUBE-SVC-", "KUBE-SVL-", "KUBE-EXT-", "KUBE-FW-", "KUBE-SEP-")
NFT_NAME_MAX = 256 - 16  # nft's name limit less the longest prefix


def _hash(text: str) -> str:
    return base64.b32encode(hashlib.sha256(text.encode()).digest()).decode()


@functools.lru_cache(maxsize=65536)
def _port_hash(port: ServicePortName) -> str:
    return _hash(str(port) + port.protocol.lower())[:16]


def iptables_chain(prefix: str, port: ServicePortName) -> str:
    """KUBE-SVC-/KUBE-SVL-/KUBE-EXT-/KUBE-FW- chain of a Service port."""
    return prefix + _port_hash(port)


def iptables_endpoint_chain(port: ServicePortName, endpoint: Endpoint) -> str:
    return "KUBE-SEP-" + _hash(str(port) + port.protocol.lower() + str(endpoint))[:16]


def is_iptables_service_chain(chain: str) -> bool:
    return chain.startswith(IPTABLES_SERVICE_PREFIXES)


def _readable(name: str) -> str:
    name = f"{_hash(name)[:8]}-{name}"
    return name if len(name) <= NFT_NAME_MAX else name[:NFT_NAME_MAX - 3] + "..."


@functools.lru_cache(maxsize=65536)
def _nft_port_base(port: ServicePortName) -> str:
    return _readable(f"{port.service.namespace}/{port.service.name}/{port.protocol.lower()}/{port.port}")


def nft_chain(prefix: str, port: ServicePortName) -> str:
    """service-/local-/external-/firewall- chain of a Service port."""
    return prefix + _nft_port_base(port)


def nft_endpoint_base(port: ServicePortName, endpoint: Endpoint) -> str:
    """The part after endpoint- (chain) and affinity- (set) of one endpoint of a Service port."""
    return _readable(f"{port.service.namespace}/{port.service.name}/{port.protocol.lower()}/{port.port}"
                     f"__{endpoint.ip}/{endpoint.port}")


def is_nft_service_chain(chain: str) -> bool:
    """Only per-Service chains have a "/" in their name; the fixed ones never do."""
    return "/" in chain
