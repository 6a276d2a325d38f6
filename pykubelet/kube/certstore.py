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

from pykubelet.util import durable, x509_fields
from pykubelet.util.x509_fields import CertificateFields

PREFIX = "kubelet-client"


class CertificateError(ValueError):
    """A certificate or key that cannot be used; the message names the file."""


@dataclass(frozen=True)
class Pair:
    cert: CertificateFields
    key_pem: bytes
    """The private key's PEM block, as it was given."""

    @property
    def not_before(self) -> float:
        return self.cert.not_before

    @property
    def not_after(self) -> float:
        return self.cert.not_after

    def valid_at(self, when: float) -> bool:
        return self.cert.valid_at(when)


def load_pair(cert_pem: bytes, key_pem: bytes, where: str) -> Pair:
    """The first certificate of cert_pem with the private key of key_pem (which may be the same PEM).

    Read with the standard library (util/x509_fields.py): the agent checks its pair at every start."""
    try:
        cert = x509_fields.read(cert_pem)
    except x509_fields.CertificateFormatError as e:
        raise CertificateError(f"{where}: {e}") from None
    key = x509_fields.private_key_pem(key_pem)  # skips certificate blocks
    if not key:
        raise CertificateError(f"{where}: no PEM private key")
    if not x509_fields.key_matches(cert_pem, key):
        raise CertificateError(f"{where}: the private key does not match the certificate (or is encrypted, "
                               "or cannot be read)")
    return Pair(cert, key)


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
