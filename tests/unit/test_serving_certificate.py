"""serverTLSBootstrap without an apiserver: the kubelet-serving CSR the node sends, when it asks
again (rotation deadline, changed addresses, no address yet), and the kubelet API's listener
switching certificates while it runs (the real flow runs in tests/cluster/test_serving_certificate.py)."""

from __future__ import annotations

import asyncio
import base64
import datetime
import os
import ssl
import stat
import time
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from pykubelet.config import ConfigError, ServerSettings, Settings, build_parser, settings_from_args
from pykubelet.kube import csr, csr_keys, rotation
from pykubelet.kube.certstore import CertStore
from pykubelet.kube.csr_keys import key_pem_of
from pykubelet.server import tls
from pykubelet.util import x509_fields
from tests.helpers import wait_for
from tests.unit.test_tls_bootstrap import CA, NOW, FakeCSRApi

ADDRESSES = [{"type": "InternalIP", "address": "10.0.0.5"}, {"type": "Hostname", "address": "node-a"}]


def sign_serving(ca: CA, request: x509.CertificateSigningRequest, lifetime: datetime.timedelta,
                 start: datetime.datetime | None = None) -> bytes:
    """What kubernetes.io/kubelet-serving's signer issues: the CSR's subject and SANs, server auth."""
    start = start or datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=1)
    builder = (x509.CertificateBuilder().subject_name(request.subject).issuer_name(ca.cert.subject)
               .public_key(request.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(start).not_valid_after(start + lifetime)
               .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False))
    try:
        builder = builder.add_extension(request.extensions.get_extension_for_class(x509.SubjectAlternativeName).value,
                                        critical=False)
    except x509.ExtensionNotFound:
        pass
    return builder.sign(ca.key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def serving_pair(ca: CA, template: csr.CSRTemplate, node: str = "node-a",
                 lifetime: datetime.timedelta = datetime.timedelta(days=365),
                 start: datetime.datetime | None = None) -> tuple[bytes, bytes]:
    key = csr_keys.new_key()
    request = x509.load_pem_x509_csr(csr_keys.csr_pem(key, node, template))
    return sign_serving(ca, request, lifetime, start), key_pem_of(key)


def test_the_serving_csr_is_the_kubelets():
    template = csr.serving_template(ADDRESSES)
    assert template is not None
    key = csr_keys.new_key()
    pem = csr_keys.csr_pem(key, "node-a", template)
    request = x509.load_pem_x509_csr(pem)
    assert isinstance(request.public_key(), ec.EllipticCurvePublicKey)
    assert request.public_key().curve.name == "secp256r1"  # so no "key encipherment" usage
    assert request.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:node-a"
    assert [a.value for a in request.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == ["system:nodes"]
    sans = request.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["node-a"]
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["10.0.0.5"]
    assert not sans.get_values_for_type(x509.RFC822Name) and not sans.get_values_for_type(x509.UniformResourceIdentifier)
    body = csr.csr_object(pem, template=template)
    assert body["metadata"] == {"generateName": "csr-"}
    assert body["spec"]["signerName"] == "kubernetes.io/kubelet-serving"
    assert body["spec"]["usages"] == ["digital signature", "server auth"]
    assert base64.b64decode(body["spec"]["request"]) == pem
    assert "expirationSeconds" not in body["spec"]


def test_the_sans_are_the_nodes_addresses_deduplicated_and_sorted():
    template = csr.serving_template([
        {"type": "Hostname", "address": "node-a"}, {"type": "InternalIP", "address": "10.0.0.9"},
        {"type": "ExternalIP", "address": "203.0.113.4"}, {"type": "InternalIP", "address": "10.0.0.10"},
        {"type": "InternalDNS", "address": "node-a.internal"}, {"type": "ExternalDNS", "address": "a.example.com"},
        {"type": "InternalIP", "address": "10.0.0.9"}, {"type": "InternalIP", "address": ""},
        {"type": "ExternalIP", "address": "not-an-ip"}])
    assert template is not None
    assert template.dns_names == ("a.example.com", "node-a", "node-a.internal")
    assert template.ips == ("10.0.0.9", "10.0.0.10", "203.0.113.4")
    # a Hostname that is an IP is an IP SAN
    assert csr.serving_template([{"type": "Hostname", "address": "192.0.2.1"}]).ips == ("192.0.2.1",)  # type: ignore[union-attr]


def test_no_serving_csr_without_an_ip_address():
    assert csr.serving_template([{"type": "Hostname", "address": "node-a"}]) is None
    assert csr.serving_template([]) is None


def test_a_certificate_satisfies_the_template_only_with_the_same_names():
    ca = CA()
    template = csr.serving_template(ADDRESSES)
    assert template is not None
    cert = x509_fields.read(serving_pair(ca, template)[0])
    assert csr.satisfies(cert, "node-a", template)
    moved = csr.serving_template([{"type": "InternalIP", "address": "10.0.0.6"}, ADDRESSES[1]])
    assert moved is not None and not csr.satisfies(cert, "node-a", moved)
    assert not csr.satisfies(cert, "node-b", template)


class SigningApi(FakeCSRApi):
    """Signs every CSR as the kubelet-serving signer does, each certificate living `lifetime`;
    `hold` keeps CSRs pending (nobody approved them yet)."""

    def __init__(self, ca: CA, lifetime: datetime.timedelta = datetime.timedelta(days=365)) -> None:
        self.hold = False
        self.created_at: list[float] = []

        def decide(obj: dict[str, Any]) -> dict[str, Any]:
            if self.hold:
                return {}
            request = x509.load_pem_x509_csr(base64.b64decode(obj["spec"]["request"]))
            return {"conditions": [{"type": "Approved", "status": "True"}],
                    "certificate": base64.b64encode(sign_serving(ca, request, lifetime)).decode()}
        super().__init__(decide)

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.created_at.append(time.time())
        return await super().create(path, body)

    async def watch(self, path: str, query: dict[str, Any], timeout: int):
        if self.hold:
            await asyncio.sleep(0.02)  # a pending CSR: the watch has nothing to say for a while
        async for event in super().watch(path, query, timeout):
            yield event

    def requested_ips(self) -> list[list[str]]:
        out = []
        for obj in self.created:
            request = x509.load_pem_x509_csr(base64.b64decode(obj["spec"]["request"]))
            sans = request.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            out.append([str(ip) for ip in sans.get_values_for_type(x509.IPAddress)])
        return out


def serving_rotation(api: SigningApi, store: CertStore, addresses: list[list[dict[str, str]]], switched: list[str]):
    async def switch(path: str) -> None:
        switched.append(path)
    return rotation.CertificateRotation(api, store, "node-a", csr.SERVING,  # type: ignore[arg-type]
                                        lambda: csr.serving_template(addresses[0]), switch)


@pytest.fixture
def fast_template_checks(monkeypatch):
    monkeypatch.setattr(rotation, "TEMPLATE_CHECK_SECONDS", 0.02)
    monkeypatch.setattr(csr, "PROGRESS_EVERY", 0.05)


async def test_the_first_certificate_is_requested_at_once_and_stored_as_kubelet_server(tmp_path, fast_template_checks):
    ca = CA()
    api, store, switched = SigningApi(ca), CertStore(str(tmp_path / "pki"), tls.SERVING_PREFIX), []
    task = asyncio.create_task(serving_rotation(api, store, [ADDRESSES], switched).run())
    try:
        await wait_for(lambda: switched, 5, "the first serving certificate")
        assert api.created[0]["spec"]["signerName"] == "kubernetes.io/kubelet-serving"
        current = tmp_path / "pki" / "kubelet-server-current.pem"
        assert current.is_symlink() and os.readlink(current).startswith("kubelet-server-2")
        assert switched == [os.path.realpath(current)]
        assert stat.S_IMODE(os.stat(current).st_mode) == 0o600
        pair = store.current()
        assert pair is not None and csr.satisfies(pair.cert, "node-a", csr.serving_template(ADDRESSES))  # type: ignore[arg-type]
        await asyncio.sleep(0.2)
        assert len(api.created) == 1  # a year-long certificate: nothing more to ask for now
    finally:
        task.cancel()


async def test_a_short_lived_certificate_is_renewed_at_70_to_90_percent_of_its_life(tmp_path, fast_template_checks):
    ca = CA()
    lifetime = datetime.timedelta(seconds=3)
    api, store, switched = SigningApi(ca, lifetime), CertStore(str(tmp_path / "pki"), tls.SERVING_PREFIX), []
    store.save(*serving_pair(ca, csr.serving_template(ADDRESSES), lifetime=lifetime))  # type: ignore[arg-type]
    first = store.current()
    assert first is not None
    task = asyncio.create_task(serving_rotation(api, store, [ADDRESSES], switched).run())
    try:
        await wait_for(lambda: api.created, 5, "a renewal CSR")
        span = first.not_after - first.not_before
        assert first.not_before + 0.7 * span <= api.created_at[0] <= first.not_before + 0.9 * span + 0.5
        await wait_for(lambda: len(switched) >= 2, 5, "the renewed certificate's own renewal")
    finally:
        task.cancel()


async def test_changed_addresses_ask_for_a_new_certificate_and_abandon_a_pending_csr(tmp_path, fast_template_checks):
    ca = CA()
    api, store, switched = SigningApi(ca), CertStore(str(tmp_path / "pki"), tls.SERVING_PREFIX), []
    addresses = [ADDRESSES]
    task = asyncio.create_task(serving_rotation(api, store, addresses, switched).run())
    try:
        await wait_for(lambda: switched, 5, "the first serving certificate")
        api.hold = True  # nobody approves for now
        addresses[0] = [{"type": "InternalIP", "address": "10.0.0.6"}, ADDRESSES[1]]
        await wait_for(lambda: len(api.created) == 2, 5, "a CSR for the new address")
        addresses[0] = [{"type": "InternalIP", "address": "10.0.0.7"}, ADDRESSES[1]]  # moved again, still pending
        await wait_for(lambda: len(api.created) == 3, 5, "a CSR for the newest address")
        assert api.requested_ips() == [["10.0.0.5"], ["10.0.0.6"], ["10.0.0.7"]]
        api.hold = False
        # the pending CSR is answered at its next look (the fake answers each watch)
        await wait_for(lambda: len(switched) == 2, 5, "the certificate for the newest address")
        pair = store.current()
        assert pair is not None and csr.satisfies(pair.cert, "node-a", csr.serving_template(addresses[0]))  # type: ignore[arg-type]
    finally:
        task.cancel()


async def test_without_an_ip_address_nothing_is_requested_until_one_appears(tmp_path, fast_template_checks):
    ca = CA()
    api, store, switched = SigningApi(ca), CertStore(str(tmp_path / "pki"), tls.SERVING_PREFIX), []
    addresses: list[list[dict[str, str]]] = [[{"type": "Hostname", "address": "node-a"}]]
    task = asyncio.create_task(serving_rotation(api, store, addresses, switched).run())
    try:
        await asyncio.sleep(0.3)
        assert not api.created and store.current() is None
        addresses[0] = ADDRESSES
        await wait_for(lambda: switched, 5, "a certificate once the node has an IP")
        assert api.requested_ips() == [["10.0.0.5"]]
    finally:
        task.cancel()


# --- the listener


class Listener:
    """The kubelet API's listener in miniature: TLS with the rotating context, answering each
    connection with the subject of the client certificate it presented (or "-")."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self.context = context
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> "Listener":
        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while await reader.readline():
                peer = writer.get_extra_info("peercert") or {}
                subject = dict(x[0] for x in peer.get("subject", ())).get("commonName", "-")
                writer.write(f"{subject}\n".encode())
                await writer.drain()
            writer.close()
        self.server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=self.context)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    async def connect(self, ca: CA, client: tuple[str, str] | None = None):
        """A client verifying against the cluster CA; (reader, writer, the server's certificate)."""
        assert self.server is not None
        context = ssl.create_default_context(cadata=ca.pem.decode())
        if client:
            context.load_cert_chain(*client)
        port = self.server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        return reader, writer, x509.load_der_x509_certificate(der)


async def ask(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> str:
    writer.write(b"who\n")
    await writer.drain()
    return (await reader.readline()).decode().strip()


def write_pair(tmp_path, name: str, pair: tuple[bytes, bytes]) -> str:
    path = tmp_path / name
    path.write_bytes(pair[0] + pair[1])
    return str(path)


async def test_the_listener_serves_no_certificate_until_one_is_loaded_then_switches_without_restart(tmp_path):
    ca = CA()
    template = csr.serving_template([{"type": "InternalIP", "address": "127.0.0.1"}, ADDRESSES[1]])
    assert template is not None
    client_cert, client_key = ca.node_pair("apiserver")  # a client certificate from the same CA
    (tmp_path / "client.pem").write_bytes(client_cert + client_key)
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(ca.pem)
    serving = tls.RotatingServingContext(ServerSettings(), str(ca_file))
    async with Listener(serving.listener) as listener:
        with pytest.raises((ssl.SSLError, ConnectionResetError)):  # nothing issued yet: no handshake, never an untrusted certificate
            await listener.connect(ca)
        first = write_pair(tmp_path, "first.pem", serving_pair(ca, template))
        await serving.load(first)
        reader, writer, cert = await listener.connect(ca, (str(tmp_path / "client.pem"),) * 2)
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:node-a"
        assert await ask(reader, writer) == "system:node:apiserver"  # client certificates still verified
        second_pair = serving_pair(ca, template)
        await serving.load(write_pair(tmp_path, "second.pem", second_pair))
        _, writer2, cert2 = await listener.connect(ca)
        assert cert2.public_bytes(serialization.Encoding.PEM) == second_pair[0]  # new connections: the new one
        assert cert2.serial_number != cert.serial_number
        assert await ask(reader, writer) == "system:node:apiserver"  # the open connection goes on
        expired = serving_pair(ca, template, start=NOW - datetime.timedelta(days=2), lifetime=datetime.timedelta(days=1))
        await serving.load(write_pair(tmp_path, "expired.pem", expired))
        with pytest.raises((ssl.SSLError, ConnectionResetError)):
            await listener.connect(ca)
        for w in (writer, writer2):
            w.close()


async def test_a_stored_certificate_is_served_from_the_start(tmp_path):
    ca = CA()
    template = csr.serving_template([{"type": "InternalIP", "address": "127.0.0.1"}])
    assert template is not None
    settings = Settings()
    settings.node_name = "node-a"
    settings.cluster.cert_dir = str(tmp_path / "pki")
    stored = serving_pair(ca, template)
    CertStore(settings.cluster.cert_dir, tls.SERVING_PREFIX).save(*stored)
    context, _rotation = await tls.bootstrapped_serving(settings, None, lambda: [])  # type: ignore[arg-type]
    async with Listener(context) as listener:
        _, writer, cert = await listener.connect(ca)
        assert cert.public_bytes(serialization.Encoding.PEM) == stored[0]
        writer.close()
    assert not (tmp_path / "pki" / tls.CERT_NAME).exists()  # no self-signed one is made in this mode


def load_settings(argv: list[str]) -> Settings:
    return settings_from_args(build_parser().parse_args(argv))


def test_server_tls_bootstrap_is_a_setting_that_needs_a_cluster(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
                      "serverTLSBootstrap: true\n")
    kubeconfig = tmp_path / "kubelet.conf"
    s = load_settings(["--config", str(config), "--kubeconfig", str(kubeconfig), "--hostname-override", "n1"])
    assert s.server.server_tls_bootstrap
    assert load_settings(["--rotate-server-certificates", "--kubeconfig", str(kubeconfig)]).server.server_tls_bootstrap
    with pytest.raises(ConfigError, match="serverTLSBootstrap.*needs --kubeconfig"):
        load_settings(["--config", str(config)])


async def test_the_listener_serves_the_certificate_the_rotation_gets(tmp_path, fast_template_checks):
    """The pieces as the agent joins them: nothing served, a CSR signed, that certificate served."""
    ca = CA()
    settings = Settings()
    settings.node_name = "node-a"
    settings.cluster.cert_dir = str(tmp_path / "pki")
    api = SigningApi(ca)
    api.hold = True
    context, rotation_ = await tls.bootstrapped_serving(settings, api, lambda: [  # type: ignore[arg-type]
        {"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": "node-a"}])
    task = asyncio.create_task(rotation_.run())
    try:
        async with Listener(context) as listener:
            await wait_for(lambda: api.created, 5, "the serving CSR")
            with pytest.raises((ssl.SSLError, ConnectionResetError)):
                await listener.connect(ca)
            api.hold = False
            reader, writer, cert = await wait_for(lambda: _connected(listener, ca), 5, "the issued certificate served")
            assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:node-a"
            writer.close()
    finally:
        task.cancel()


async def _connected(listener: Listener, ca: CA):
    try:
        return await listener.connect(ca)
    except (ssl.SSLError, ConnectionResetError):
        return None
