"""TLS of the kubelet API: the serving certificate and the server's SSL context.

Without tlsCertFile/tlsPrivateKeyFile the kubelet makes a self-signed certificate for its node
once and keeps it in <cert-dir>/kubelet.crt and kubelet.key; a restart reuses it, so clients
that pinned it keep working. With a client CA, client certificates are asked for but not
required: requests without one go on to token or anonymous authentication.

With serverTLSBootstrap the certificate comes from the cluster instead (a kubelet-serving CSR,
kube/rotation.py) and changes under the running server (RotatingServingContext); no self-signed
one is made.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import os
import ssl
import time
from typing import TYPE_CHECKING, Callable

from pykubelet.config import ServerSettings, Settings
from pykubelet.util import tls_names, x509_fields
from pykubelet.util.log import get_logger

# cryptography (~20 ms of a start) is imported where a certificate is made, always in a thread; one
# is read with the standard library (util/x509_fields.py): a restart that serves its stored pair
# needs only ssl.
if TYPE_CHECKING:  # the API client costs ~40 MB: a standalone node never loads it
    from pykubelet.kube.client import KubeClient
    from pykubelet.kube.rotation import CertificateRotation

log = get_logger(__name__)

CERT_NAME, KEY_NAME = "kubelet.crt", "kubelet.key"
SERVING_PREFIX = "kubelet-server"  # <cert-dir>/kubelet-server-<time>.pem, kubelet-server-current.pem
VALIDITY = datetime.timedelta(days=365)


class TLSError(RuntimeError):
    """The serving certificate, key or client CA cannot be used; the message names the file."""


def self_signed(node_name: str, ips: list[str]) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM) for serving as `node_name`, with the node name and IPs as SANs."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{node_name}@{int(now.timestamp())}")])
    sans: list[x509.GeneralName] = [x509.DNSName(node_name)]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips if ip]
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False, content_commitment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def _usable(cert_path: str, key_path: str) -> bool:
    try:  # a bare server context: the system's CA bundle (~25 ms to load) has no part in this check
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert_path, key_path)
        return True
    except (OSError, ssl.SSLError):
        return False


def serving_files(settings: ServerSettings, cert_dir: str, node_name: str, ips: list[str]) -> tuple[str, str]:
    """The certificate and key files to serve with: the configured ones, or the node's self-signed
    pair in `cert_dir` (Settings.certificate_dir)."""
    if settings.tls_cert_file or settings.tls_private_key_file:
        if not (settings.tls_cert_file and settings.tls_private_key_file):
            raise TLSError("tlsCertFile and tlsPrivateKeyFile must be given together")
        return settings.tls_cert_file, settings.tls_private_key_file
    cert_path, key_path = os.path.join(cert_dir, CERT_NAME), os.path.join(cert_dir, KEY_NAME)
    if _usable(cert_path, key_path):
        return cert_path, key_path
    os.makedirs(cert_dir, mode=0o700, exist_ok=True)
    cert_pem, key_pem = self_signed(node_name, ips)
    for path, data, mode in ((key_path, key_pem, 0o600), (cert_path, cert_pem, 0o644)):
        tmp = path + ".tmp"
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    log.info("Generated a self-signed serving certificate for the kubelet API", cert=cert_path, node=node_name)
    return cert_path, key_path


def server_context(settings: ServerSettings, cert_path: str, key_path: str, client_ca_file: str) -> ssl.SSLContext:
    context = _configured(settings, client_ca_file)
    try:
        context.load_cert_chain(cert_path, key_path)
    except (OSError, ssl.SSLError) as e:
        raise TLSError(f"cannot load the serving certificate {cert_path} with key {key_path}: {e}") from None
    return context


def _configured(settings: ServerSettings, client_ca_file: str) -> ssl.SSLContext:
    """A server context with every setting but the certificate."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = tls_names.VERSIONS[settings.tls_min_version or "VersionTLS12"]
    if settings.tls_cipher_suites:
        context.set_ciphers(":".join(tls_names.CIPHER_SUITES[name] for name in settings.tls_cipher_suites))
    context.set_alpn_protocols(["http/1.1"])  # the apiserver asks for http/1.1 on upgrades
    if client_ca_file:
        try:
            context.load_verify_locations(cafile=client_ca_file)
        except (OSError, ssl.SSLError) as e:
            raise TLSError(f"cannot load the client CA file {client_ca_file}: {e}") from None
        context.verify_mode = ssl.CERT_OPTIONAL  # asked for, not required: tokens and anonymous still work
    return context


class RotatingServingContext:
    """The listener's TLS when the serving certificate changes while the server runs.

    The listener's own context has no certificate: each handshake takes the current one (the SNI
    callback, which OpenSSL calls with or without a server name), so a new certificate serves the
    next connection, and connections already open keep theirs. Every context carries all the
    settings (versions, ciphers, ALPN, client CA), since a handshake uses some of each. With no
    certificate, or an expired one, the handshake fails, as the kubelet's does ("no serving
    certificate available for the kubelet"): a client must never get a certificate it cannot trust.
    """

    def __init__(self, settings: ServerSettings, client_ca_file: str):
        self.settings = settings
        self.client_ca_file = client_ca_file
        self.listener = _configured(settings, client_ca_file)
        self.listener.sni_callback = self._choose
        self._current: tuple[ssl.SSLContext, float] | None = None  # context, its certificate's notAfter

    @property
    def serving(self) -> bool:
        current = self._current
        return current is not None and time.time() < current[1]

    async def load(self, cert_path: str, key_path: str | None = None) -> None:
        """Serve this certificate (and key; the cert store keeps both in one file) from now on."""
        self._current = await asyncio.to_thread(self._build, cert_path, key_path or cert_path)

    def _build(self, cert_path: str, key_path: str) -> tuple[ssl.SSLContext, float]:
        context = server_context(self.settings, cert_path, key_path, self.client_ca_file)
        try:
            with open(cert_path, "rb") as f:
                not_after = x509_fields.read(f.read()).not_after
        except (OSError, ValueError) as e:
            raise TLSError(f"cannot read the serving certificate {cert_path}: {e}") from None
        return context, not_after

    def _choose(self, connection: ssl.SSLObject, _server_name: str | None, _listener: ssl.SSLContext) -> int | None:
        current = self._current
        if current is None or time.time() >= current[1]:
            return ssl.ALERT_DESCRIPTION_INTERNAL_ERROR  # nothing to serve (yet); not logged: any client can ask
        connection.context = current[0]
        return None


async def bootstrapped_serving(settings: Settings, kube: KubeClient,
                               addresses: Callable[[], list[dict[str, str]]]) -> tuple[ssl.SSLContext,
                                                                                       CertificateRotation]:
    """serverTLSBootstrap: the listener's context, serving the stored certificate if there is one,
    and the rotation that requests the first or next one for the node's `addresses` (Node status
    addresses) and switches the listener to it. Before the first one is stored, tlsCertFile and
    tlsPrivateKeyFile are served if both are set, as the kubelet's certificate store falls back to them."""
    from pykubelet.kube.certstore import CertificateError, CertStore
    from pykubelet.kube.csr import SERVING, serving_template
    from pykubelet.kube.rotation import CertificateRotation

    serving = RotatingServingContext(settings.server, settings.authn.client_ca_file)
    store = CertStore(settings.certificate_dir(), SERVING_PREFIX)
    try:
        pair = await asyncio.to_thread(store.current)
    except CertificateError as e:
        log.error("Ignoring the stored serving certificate; requesting a new one", err=str(e))
        pair = None
    server = settings.server
    try:
        if pair is not None:
            await serving.load(store.current_path)
        elif server.tls_cert_file and server.tls_private_key_file:
            await serving.load(server.tls_cert_file, server.tls_private_key_file)
    except TLSError as e:
        log.error("Cannot serve the certificate at hand; requesting one", err=str(e))
    if not serving.serving:
        log.warning("The kubelet API has no serving certificate yet (serverTLSBootstrap): TLS handshakes fail "
                    "until the node's kubelet-serving CSR is approved and signed", certDir=store.directory)

    async def switch(path: str) -> None:
        try:
            await serving.load(path)
        except TLSError as e:
            raise CertificateError(str(e)) from None  # a failed rotation: retried with a new key
        log.info("The kubelet API serves the new certificate", file=path)

    rotation = CertificateRotation(kube, store, settings.node_name, SERVING, lambda: serving_template(addresses()),
                                   switch)
    return serving.listener, rotation
