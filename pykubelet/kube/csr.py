"""The node's certificates from the apiserver: what a CertificateSigningRequest asks for, sending it,
waiting for its approval, and whether a certificate still answers it (the key and the CSR itself
are made in csr_keys.py, with cryptography).

Two kinds, both the kubelet's, both subject CN=system:node:<node>, O=system:nodes, with an ECDSA
P-256 key (so never "key encipherment", which only RSA keys ask for) and no expirationSeconds
(the signer's duration applies):
- the client certificate (CLIENT): signer kubernetes.io/kube-apiserver-client-kubelet, no SANs,
  usages "digital signature" and "client auth". The csrapproving controller recognises and
  auto-approves it, for a bootstrap token (nodeclient) or the node itself (selfnodeclient). The
  bootstrap CSR's name is derived from its key and subject, so an agent restarted while waiting
  finds its own CSR again instead of making another.
- the serving certificate of the kubelet API (serving_template, serverTLSBootstrap): signer
  kubernetes.io/kubelet-serving, usages "digital signature" and "server auth", the node's
  addresses as SANs. Nothing in kube-controller-manager approves it: an admin
  (`kubectl certificate approve`) or an approver must, after checking the names it asks for.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import importlib
import ipaddress
import time
from dataclasses import dataclass
from typing import Any, Iterable

from pykubelet.kube import errors
from pykubelet.kube.client import KubeClient
from pykubelet.util.log import get_logger
from pykubelet.util.x509_fields import CertificateFields

log = get_logger(__name__)

CSR_PATH = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"
USAGES = ("digital signature", "client auth")
SERVING_SIGNER = "kubernetes.io/kubelet-serving"
SERVING_USAGES = ("digital signature", "server auth")
NODES_GROUP = "system:nodes"
PROGRESS_EVERY = 10.0  # seconds between "still waiting" lines
WATCH_SECONDS = 60


@dataclass(frozen=True)
class CSRTemplate:
    """What a CSR asks for besides the node's subject: signer, usages and SANs."""

    what: str
    """How logs name the certificate: "client certificate", "serving certificate"."""
    signer: str
    usages: tuple[str, ...]
    dns_names: tuple[str, ...] = ()
    ips: tuple[str, ...] = ()

    @property
    def manual_approval(self) -> bool:
        """No controller of the cluster approves these: say so while waiting."""
        return self.signer == SERVING_SIGNER


CLIENT = CSRTemplate("client certificate", SIGNER, USAGES)
SERVING = "serving certificate"


def serving_template(addresses: Iterable[dict[str, str]]) -> CSRTemplate | None:
    """The serving CSR for these Node status addresses; None while there is no IP to put in it.

    As the kubelet: Hostname (a DNS name, or an IP if it parses as one), InternalDNS and
    ExternalDNS become DNS SANs, InternalIP and ExternalIP IP SANs; each once, sorted. Without an
    IP SAN no CSR is made (a DNS-only serving certificate is refused by default)."""
    dns: set[str] = set()
    ips: set[ipaddress.IPv4Address | ipaddress.IPv6Address] = set()
    for entry in addresses:
        kind, value = entry.get("type", ""), entry.get("address", "")
        if not value:
            continue
        try:
            ip = ipaddress.ip_address(value)
        except ValueError:
            ip = None
        if kind in ("InternalIP", "ExternalIP", "Hostname") and ip is not None:
            ips.add(ip)
        elif kind in ("InternalDNS", "ExternalDNS") or (kind == "Hostname" and ip is None):
            dns.add(value)
    if not ips:
        return None
    return CSRTemplate(SERVING, SERVING_SIGNER, SERVING_USAGES, tuple(sorted(dns)),
                       tuple(str(ip) for ip in sorted(ips, key=lambda ip: (ip.version, int(ip)))))


def satisfies(cert: CertificateFields, node_name: str, template: CSRTemplate) -> bool:
    """The certificate is for the node and carries exactly the template's SANs (a changed address
    asks for a new one, as the kubelet's certificate manager decides)."""
    if cert.common_names != (node_common_name(node_name),) or set(cert.organizations) != {NODES_GROUP}:
        return False
    return set(cert.dns_names) == set(template.dns_names) and set(cert.ips) == set(template.ips)


async def import_key_maker() -> None:
    """Import csr_keys, and with it cryptography (~40 ms of reading and loading files), in a thread:
    a node makes its first key long after its start, with the event loop serving its pods."""
    await asyncio.to_thread(importlib.import_module, "pykubelet.kube.csr_keys")


class CSRDenied(Exception):
    """The CSR was denied or failed: a new one (new key) may fare better, after a back-off."""


class CSRTimeout(Exception):
    """Nobody approved or signed the CSR in time."""


def node_common_name(node_name: str) -> str:
    """The CN of both of the node's certificates (their O is NODES_GROUP)."""
    return f"system:node:{node_name}"


def csr_object(pem: bytes, name: str = "", template: CSRTemplate = CLIENT) -> dict[str, Any]:
    metadata = {"name": name} if name else {"generateName": "csr-"}
    return {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest", "metadata": metadata,
            "spec": {"request": base64.b64encode(pem).decode(), "signerName": template.signer,
                     "usages": list(template.usages)}}


def _outcome(csr: dict[str, Any]) -> bytes | None:
    """The issued certificate, None while pending; CSRDenied if it was denied or failed."""
    status = csr.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") in ("Denied", "Failed") and condition.get("status", "True") == "True":
            raise CSRDenied(f"certificate signing request {csr['metadata']['name']} was "
                            f"{condition['type'].lower()}: {condition.get('reason', '')} {condition.get('message', '')}"
                            .rstrip())
    certificate = status.get("certificate")
    return base64.b64decode(certificate) if certificate else None


async def request_certificate(kube: KubeClient, pem: bytes, *, name: str = "", wait_seconds: float,
                              template: CSRTemplate = CLIENT) -> bytes:
    """Create the CSR (or find ours, by name) and wait until it is signed; the certificate's PEM."""
    what = template.what
    try:
        csr = await kube.create(CSR_PATH, csr_object(pem, name, template))
    except errors.Conflict:
        csr = await kube.get(f"{CSR_PATH}/{name}")
        from pykubelet.kube.csr_keys import same_request  # loaded already: the caller made `pem` with it

        if not same_request(base64.b64decode(csr["spec"]["request"]), pem):
            raise CSRDenied(f"certificate signing request {name} exists for another key or subject") from None
    name = csr["metadata"]["name"]
    if template.manual_approval:
        log.info(f"Waiting for the {what}: nothing in the cluster approves {template.signer} requests by "
                 "itself; check the names it asks for, then approve it", csr=name, signer=template.signer,
                 dnsNames=",".join(template.dns_names), ips=",".join(template.ips),
                 approve=f"kubectl certificate approve {name}")
    else:
        log.info(f"Waiting for the {what}", csr=name, signer=template.signer)
    began = time.monotonic()
    deadline = began + wait_seconds
    said = began
    version = csr["metadata"].get("resourceVersion", "")
    while (certificate := _outcome(csr)) is None:
        now = time.monotonic()
        if now >= deadline:
            raise CSRTimeout(f"certificate signing request {name} was not approved and signed within "
                             f"{wait_seconds:.0f}s (approve it: kubectl certificate approve {name})")
        if now - said >= PROGRESS_EVERY:
            said = now
            approved = any(c.get("type") == "Approved" for c in (csr.get("status") or {}).get("conditions") or [])
            log.info(f"Still waiting for the {what}", csr=name, waited=f"{now - began:.0f}s",
                     state="approved, not signed yet" if approved else
                     f"pending approval (kubectl certificate approve {name})")
        csr, version = await _next_version(kube, name, version, min(deadline - now, PROGRESS_EVERY))
    log.info(f"{what.capitalize()} issued", csr=name, waited=f"{time.monotonic() - began:.1f}s")
    return certificate


async def _next_version(kube: KubeClient, name: str, version: str, seconds: float) -> tuple[dict[str, Any], str]:
    """The CSR once it changes, or as it is after `seconds`."""
    query = {"fieldSelector": f"metadata.name={name}", "resourceVersion": version}
    try:
        async with asyncio.timeout(max(seconds, 0.1)), contextlib.aclosing(
                kube.watch(CSR_PATH, query, WATCH_SECONDS)) as events:
            async for event in events:
                obj = event.get("object") or {}
                if event.get("type") in ("ADDED", "MODIFIED") and obj.get("metadata", {}).get("name") == name:
                    return obj, obj["metadata"].get("resourceVersion", version)
    except (TimeoutError, errors.Gone):
        pass
    csr = await kube.get(f"{CSR_PATH}/{name}")
    return csr, csr["metadata"].get("resourceVersion", version)
