"""A client certificate for the node from the apiserver: key, CertificateSigningRequest, approval.

The CSR is the kubelet's: signer kubernetes.io/kube-apiserver-client-kubelet, subject
CN=system:node:<node>, O=system:nodes, no SANs, usages "digital signature" and "client auth"
(plus "key encipherment" for RSA keys, which the node never makes: every key is ECDSA P-256), no
expirationSeconds (the signer's duration applies). That is what the csrapproving controller
recognises and auto-approves, for a bootstrap token (nodeclient) or the node itself (selfnodeclient).
The bootstrap CSR's name is derived from its key and subject, so an agent restarted while waiting
finds its own CSR again instead of making another.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import time
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from pykubelet.kube import errors
from pykubelet.kube.client import KubeClient
from pykubelet.util.log import get_logger

log = get_logger(__name__)

CSR_PATH = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"
USAGES = ("digital signature", "client auth")
NODES_GROUP = "system:nodes"
PROGRESS_EVERY = 10.0  # seconds between "still waiting" lines
WATCH_SECONDS = 60


class CSRDenied(Exception):
    """The CSR was denied or failed: a new one (new key) may fare better, after a back-off."""


class CSRTimeout(Exception):
    """Nobody approved or signed the CSR in time."""


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def node_subject(node_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, NODES_GROUP),
                      x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node_name}")])


def csr_pem(key: ec.EllipticCurvePrivateKey, node_name: str) -> bytes:
    request = x509.CertificateSigningRequestBuilder().subject_name(node_subject(node_name)).sign(key, hashes.SHA256())
    return request.public_bytes(serialization.Encoding.PEM)


def bootstrap_csr_name(key: ec.EllipticCurvePrivateKey, node_name: str) -> str:
    """node-csr-<digest>: the kubelet's name for its bootstrap CSR. The digest (SHA-512/256) covers the
    public key, CN, O and usages, each base64url-encoded and followed by "|" so no two inputs collide."""
    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).decode().rstrip("=")

    public = key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    digest = hashlib.new("sha512_256")
    for part in (public, f"system:node:{node_name}".encode(), NODES_GROUP.encode(), *(u.encode() for u in USAGES)):
        digest.update(b64(part).encode() + b"|")
    return "node-csr-" + b64(digest.digest())


def csr_object(pem: bytes, name: str = "") -> dict[str, Any]:
    metadata = {"name": name} if name else {"generateName": "csr-"}
    return {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest", "metadata": metadata,
            "spec": {"request": base64.b64encode(pem).decode(), "signerName": SIGNER, "usages": list(USAGES)}}


def _same_request(theirs: bytes, ours: bytes) -> bool:
    """Same key and subject (ECDSA signatures differ from one signing to the next)."""
    try:
        a, b = x509.load_pem_x509_csr(theirs), x509.load_pem_x509_csr(ours)
    except ValueError:
        return False
    return a.subject == b.subject and a.public_key() == b.public_key()


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


async def request_certificate(kube: KubeClient, pem: bytes, *, name: str = "", wait_seconds: float) -> bytes:
    """Create the CSR (or find ours, by name) and wait until it is signed; the certificate's PEM."""
    try:
        csr = await kube.create(CSR_PATH, csr_object(pem, name))
    except errors.Conflict:
        csr = await kube.get(f"{CSR_PATH}/{name}")
        if not _same_request(base64.b64decode(csr["spec"]["request"]), pem):
            raise CSRDenied(f"certificate signing request {name} exists for another key or subject") from None
    name = csr["metadata"]["name"]
    log.info("Waiting for the client certificate", csr=name, signer=SIGNER)
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
            log.info("Still waiting for the client certificate", csr=name, waited=f"{now - began:.0f}s",
                     state="approved, not signed yet" if approved else
                     f"pending approval (kubectl certificate approve {name})")
        csr, version = await _next_version(kube, name, version, min(deadline - now, PROGRESS_EVERY))
    log.info("Client certificate issued", csr=name, waited=f"{time.monotonic() - began:.1f}s")
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
