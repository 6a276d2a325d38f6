"""The node's keys and certificate signing requests, made with cryptography.

Imported only when a key or CSR is made: at TLS bootstrap, and when a rotation falls due (or a
CSR of ours is found again after a restart). cryptography costs the agent 8 MiB of RSS and
~40 ms of its start for as long as it runs; reading the certificates the node already holds needs
only the standard library (util/x509_fields.py).
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from pykubelet.kube.csr import CLIENT, NODES_GROUP, USAGES, CSRTemplate, node_common_name


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def key_pem_of(key: ec.EllipticCurvePrivateKey) -> bytes:
    """The key as the kubelet writes it: unencrypted, "EC PRIVATE KEY"."""
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption())


def read_key(pem: bytes) -> ec.EllipticCurvePrivateKey | None:
    """The unencrypted ECDSA key in pem; None if there is none."""
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError):
        return None
    return key if isinstance(key, ec.EllipticCurvePrivateKey) else None


def node_subject(node_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, NODES_GROUP),
                      x509.NameAttribute(NameOID.COMMON_NAME, node_common_name(node_name))])


def csr_pem(key: ec.EllipticCurvePrivateKey, node_name: str, template: CSRTemplate = CLIENT) -> bytes:
    builder = x509.CertificateSigningRequestBuilder().subject_name(node_subject(node_name))
    sans: list[x509.GeneralName] = [x509.DNSName(name) for name in template.dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in template.ips]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def bootstrap_csr_name(key: ec.EllipticCurvePrivateKey, node_name: str) -> str:
    """node-csr-<digest>: the kubelet's name for its bootstrap CSR. The digest (SHA-512/256) covers the
    public key, CN, O and usages, each base64url-encoded and followed by "|" so no two inputs collide."""
    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).decode().rstrip("=")

    public = key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    digest = hashlib.new("sha512_256")
    for part in (public, node_common_name(node_name).encode(), NODES_GROUP.encode(), *(u.encode() for u in USAGES)):
        digest.update(b64(part).encode() + b"|")
    return "node-csr-" + b64(digest.digest())


def same_request(theirs: bytes, ours: bytes) -> bool:
    """Same key and subject (ECDSA signatures differ from one signing to the next)."""
    try:
        a, b = x509.load_pem_x509_csr(theirs), x509.load_pem_x509_csr(ours)
    except ValueError:
        return False
    return a.subject == b.subject and a.public_key() == b.public_key()
