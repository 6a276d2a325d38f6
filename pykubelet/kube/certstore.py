"""The node's client certificates on disk, laid out as the kubelet's certificate store:

    <cert-dir>/kubelet-client-YYYY-MM-DD-HH-MM-SS.pem   certificate and key in one PEM (0600)
    <cert-dir>/kubelet-client-current.pem               a symlink to the newest one

A new pair is written under its own name, then the link is switched by renaming a fresh link
(kubelet-client-updated.pem) over it, so a reader sees the old pair or the new one, never half.
kubeadm's kubelet-finalize step and the node's kubeconfig point at kubelet-client-current.pem.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from pykubelet.util import durable

PREFIX = "kubelet-client"


class CertificateError(ValueError):
    """A certificate or key that cannot be used; the message names the file."""


@dataclass(frozen=True)
class Pair:
    cert: x509.Certificate
    key_pem: bytes
    cert_pem: bytes

    @property
    def not_before(self) -> float:
        return self.cert.not_valid_before_utc.timestamp()

    @property
    def not_after(self) -> float:
        return self.cert.not_valid_after_utc.timestamp()

    def valid_at(self, when: float) -> bool:
        return self.not_before <= when < self.not_after


def load_pair(cert_pem: bytes, key_pem: bytes, where: str) -> Pair:
    """The first certificate of cert_pem with the private key of key_pem (which may be the same PEM)."""
    try:
        certs = x509.load_pem_x509_certificates(cert_pem)
    except ValueError as e:
        raise CertificateError(f"{where}: no PEM certificate ({e})") from None
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)  # skips certificate blocks
    except (ValueError, TypeError) as e:
        raise CertificateError(f"{where}: no usable PEM private key ({e})") from None
    if not isinstance(key, (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey)):
        raise CertificateError(f"{where}: unsupported private key type {type(key).__name__}")
    if key.public_key().public_numbers() != certs[0].public_key().public_numbers():  # type: ignore[union-attr]
        raise CertificateError(f"{where}: the private key does not match the certificate")
    return Pair(certs[0], key_pem=key_pem_of(key), cert_pem=certs[0].public_bytes(serialization.Encoding.PEM))


def key_pem_of(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    """The key as the kubelet writes it: unencrypted, "EC PRIVATE KEY" (or "RSA PRIVATE KEY")."""
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption())


class CertStore:
    def __init__(self, directory: str, prefix: str = PREFIX):
        self.directory = directory
        self.prefix = prefix

    @property
    def current_path(self) -> str:
        return os.path.join(self.directory, f"{self.prefix}-current.pem")

    def current(self) -> Pair | None:
        """The current pair; None if there is none; CertificateError if it does not load."""
        try:
            with open(self.current_path, "rb") as f:
                pem = f.read()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise CertificateError(f"{self.current_path}: cannot read: {e.strerror}") from None
        return load_pair(pem, pem, self.current_path)

    def save(self, cert_pem: bytes, key_pem: bytes) -> str:
        """Write a new pair and make it current; returns its file."""
        pair = load_pair(cert_pem, key_pem, "the new certificate")
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d-%H-%M-%S")
        name = f"{self.prefix}-{stamp}.pem"
        path = os.path.join(self.directory, name)
        # Synced before the link moves to it: a power loss never leaves a torn current pair.
        durable.write_file(path, cert_pem.rstrip(b"\n") + b"\n" + pair.key_pem, 0o600)
        updated = os.path.join(self.directory, f"{self.prefix}-updated.pem")
        if os.path.lexists(updated):
            os.unlink(updated)
        os.symlink(name, updated)  # relative: the directory can move (a chroot, a bind mount)
        durable.replace(updated, self.current_path)
        return path
