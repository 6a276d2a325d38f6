"""TLS bootstrap and rotation pieces without an apiserver: the CSR the node sends, its name, the
cert store's files, the kubeconfigs read and written, the rotation deadline, and what is done
with an approved, denied or unanswered CSR (the real flow runs in tests/cluster/test_tls_bootstrap.py)."""

from __future__ import annotations

import base64
import datetime
import os
import random
import re
import stat
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from pykubelet.config.settings import ClusterSettings
from pykubelet.kube import bootstrap, csr, csr_keys, errors
from pykubelet.kube.certstore import CertificateError, CertStore, load_pair
from pykubelet.kube.csr_keys import key_pem_of
from pykubelet.kube.kubeconfig import KubeconfigError, read_kubeconfig, write_node_kubeconfig
from pykubelet.kube.rotation import rotation_deadline

NOW = datetime.datetime.now(datetime.timezone.utc)


class CA:
    def __init__(self) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
        self.cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(self.key.public_key())
                     .serial_number(1).not_valid_before(NOW - datetime.timedelta(days=1))
                     .not_valid_after(NOW + datetime.timedelta(days=10))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .sign(self.key, hashes.SHA256()))

    @property
    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def sign(self, public_key, subject: x509.Name, *, start: datetime.datetime = NOW,
             lifetime: datetime.timedelta = datetime.timedelta(days=365)) -> bytes:
        cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(self.cert.subject).public_key(public_key)
                .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(start + lifetime)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                .sign(self.key, hashes.SHA256()))
        return cert.public_bytes(serialization.Encoding.PEM)

    def node_pair(self, node: str = "n1", **kwargs) -> tuple[bytes, bytes]:
        key = csr_keys.new_key()
        return self.sign(key.public_key(), csr_keys.node_subject(node), **kwargs), key_pem_of(key)


def test_the_csr_is_the_kubelets_client_csr():
    key = csr_keys.new_key()
    request = x509.load_pem_x509_csr(csr_keys.csr_pem(key, "worker-1"))
    assert isinstance(request.public_key(), ec.EllipticCurvePublicKey)
    assert request.public_key().curve.name == "secp256r1"
    assert request.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:worker-1"
    assert [a.value for a in request.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == ["system:nodes"]
    assert not list(request.extensions)  # no SANs: csrapproving refuses client CSRs with any
    body = csr.csr_object(csr_keys.csr_pem(key, "worker-1"), "node-csr-x")
    assert body["spec"]["signerName"] == "kubernetes.io/kube-apiserver-client-kubelet"
    assert body["spec"]["usages"] == ["digital signature", "client auth"]
    assert "expirationSeconds" not in body["spec"]


def test_the_bootstrap_csr_name_follows_the_key_and_the_node():
    key, other = csr_keys.new_key(), csr_keys.new_key()
    name = csr_keys.bootstrap_csr_name(key, "n1")
    assert re.fullmatch(r"node-csr-[A-Za-z0-9_-]{43}", name)  # base64url of 32 bytes, unpadded
    assert csr_keys.bootstrap_csr_name(key, "n1") == name
    assert csr_keys.bootstrap_csr_name(other, "n1") != name and csr_keys.bootstrap_csr_name(key, "n2") != name


def test_the_store_writes_a_timestamped_pair_and_points_current_at_it(tmp_path):
    ca = CA()
    store = CertStore(str(tmp_path / "pki"))
    assert store.current() is None
    first = store.save(*ca.node_pair())
    assert re.fullmatch(r"kubelet-client-\d{4}(-\d\d){5}\.pem", os.path.basename(first))
    assert stat.S_IMODE(os.stat(first).st_mode) == 0o600
    assert os.path.realpath(store.current_path) == first
    pem = open(first, "rb").read()
    assert b"BEGIN CERTIFICATE" in pem and b"BEGIN EC PRIVATE KEY" in pem
    assert store.current().cert.common_names == ("system:node:n1",)
    os.rename(first, first.replace(".pem", "-old.pem"))  # the next save within the same second
    second = store.save(*ca.node_pair("n1"))
    assert os.path.realpath(store.current_path) == second
    assert not os.path.lexists(tmp_path / "pki" / "kubelet-client-updated.pem")


def test_a_key_that_does_not_match_its_certificate_is_refused(tmp_path):
    ca = CA()
    cert, _ = ca.node_pair()
    _, other_key = ca.node_pair()
    with pytest.raises(CertificateError, match="does not match"):
        load_pair(cert, other_key, "x.pem")


def test_the_rotation_deadline_is_between_70_and_90_percent_of_the_lifetime():
    ca = CA()
    start = NOW - datetime.timedelta(hours=1)
    cert, key = ca.node_pair(start=start, lifetime=datetime.timedelta(hours=100))
    pair = load_pair(cert, key, "test")
    rng = random.Random(7)
    fractions = [(rotation_deadline(pair, rng) - pair.not_before) / (100 * 3600) for _ in range(500)]
    assert 0.7 <= min(fractions) < 0.72 and 0.88 < max(fractions) <= 0.9  # jittered across the whole range


def kubeconfig(path, server="https://10.0.0.1:6443", ca: bytes = b"", user: dict[str, Any] | None = None) -> str:
    cluster = {"server": server, **({"certificate-authority-data": base64.b64encode(ca).decode()} if ca else {})}
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
           "clusters": [{"name": "k", "cluster": cluster}], "users": [{"name": "u", "user": user or {}}],
           "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_the_written_kubeconfig_names_the_current_pair_and_the_bootstrap_server_and_ca(tmp_path):
    ca = CA()
    boot = read_kubeconfig(kubeconfig(tmp_path / "bootstrap.conf", ca=ca.pem,
                                      user={"token": "abcdef.0123456789abcdef"}))
    out = tmp_path / "etc" / "kubelet.conf"
    write_node_kubeconfig(str(out), boot, "/var/lib/kubelet/pki/kubelet-client-current.pem")
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    doc = yaml.safe_load(out.read_text())
    assert doc["current-context"] == "default-context"
    assert doc["clusters"][0] == {"name": "default-cluster", "cluster": {
        "server": "https://10.0.0.1:6443", "certificate-authority-data": base64.b64encode(ca.pem).decode()}}
    assert doc["users"][0]["user"] == {"client-certificate": "/var/lib/kubelet/pki/kubelet-client-current.pem",
                                       "client-key": "/var/lib/kubelet/pki/kubelet-client-current.pem"}


@pytest.mark.parametrize("text, field", [
    ("apiVersion: v1\nkind: Config\n", "current-context"),
    ("current-context: c\ncontexts: [{name: c, context: {cluster: k}}]\n", "clusters"),
    ("current-context: c\ncontexts: [{name: c, context: {cluster: k}}]\nclusters: [{name: k, cluster: {}}]\n",
     "server"),
    ("current-context: c\ncontexts: [{name: c, context: {cluster: k}}]\n"
     "clusters: [{name: k, cluster: {server: 'https://x', certificate-authority-data: '%%%'}}]\n",
     "certificate-authority-data"),
])
def test_a_broken_kubeconfig_is_an_error_naming_the_file_and_field(tmp_path, text, field):
    path = tmp_path / "bootstrap.conf"
    path.write_text(text)
    with pytest.raises(KubeconfigError, match=re.escape(str(path)) + ".*" + field):
        read_kubeconfig(str(path))


def settings(tmp_path, **kwargs) -> ClusterSettings:
    return ClusterSettings(kubeconfig=str(tmp_path / "kubelet.conf"), cert_dir=str(tmp_path / "pki"), **kwargs)


async def test_a_valid_kubeconfig_is_used_as_it_is_without_rotation(tmp_path):
    ca = CA()
    cert, key = ca.node_pair()
    cluster = settings(tmp_path)
    kubeconfig(tmp_path / "kubelet.conf", ca=ca.pem, user={"client-certificate-data": base64.b64encode(cert).decode(),
                                                          "client-key-data": base64.b64encode(key).decode()})
    creds = await bootstrap.node_credentials(cluster, "n1", "test")
    assert creds == bootstrap.NodeCredentials(cluster.kubeconfig, "", False)
    assert not (tmp_path / "pki").exists()


async def test_with_rotation_an_embedded_certificate_seeds_the_store(tmp_path):
    """kubeadm init's kubelet.conf embeds the node's first certificate; kubelet-finalize looks for
    kubelet-client-current.pem afterwards."""
    ca = CA()
    cert, key = ca.node_pair()
    cluster = settings(tmp_path, rotate_certificates=True)
    kubeconfig(tmp_path / "kubelet.conf", ca=ca.pem, user={"client-certificate-data": base64.b64encode(cert).decode(),
                                                          "client-key-data": base64.b64encode(key).decode()})
    creds = await bootstrap.node_credentials(cluster, "n1", "test")
    store = CertStore(cluster.cert_dir)
    assert creds == bootstrap.NodeCredentials(cluster.kubeconfig, store.current_path, True)
    assert x509.load_pem_x509_certificate(open(store.current_path, "rb").read()).public_bytes(serialization.Encoding.PEM) == cert


async def test_the_credential_files_are_read_and_written_off_the_event_loop(tmp_path, monkeypatch):
    """Static pods may run while the node finds its credentials: the kubeconfig's read, the
    certificate check and the store's write happen in threads."""
    import threading

    ca = CA()
    cert, key = ca.node_pair()
    cluster = settings(tmp_path, rotate_certificates=True)
    kubeconfig(tmp_path / "kubelet.conf", ca=ca.pem, user={"client-certificate-data": base64.b64encode(cert).decode(),
                                                          "client-key-data": base64.b64encode(key).decode()})
    on_the_loop = []
    for name in ("read_kubeconfig", "load_pair"):
        real = getattr(bootstrap, name)

        def watched(*args, real=real, name=name):
            on_the_loop.append((name, threading.current_thread() is threading.main_thread()))
            return real(*args)
        monkeypatch.setattr(bootstrap, name, watched)
    real_save = CertStore.save

    def save(self, *args):
        on_the_loop.append(("save", threading.current_thread() is threading.main_thread()))
        return real_save(self, *args)
    monkeypatch.setattr(CertStore, "save", save)
    await bootstrap.node_credentials(cluster, "n1", "test")
    assert {name for name, _ in on_the_loop} == {"read_kubeconfig", "load_pair", "save"}
    assert [name for name, main in on_the_loop if main] == []


@pytest.mark.parametrize("state", ["missing", "expired"])
async def test_without_a_usable_kubeconfig_or_a_bootstrap_kubeconfig_the_error_names_the_file(tmp_path, state):
    cluster = settings(tmp_path)
    if state == "expired":
        ca = CA()
        cert, key = ca.node_pair(start=NOW - datetime.timedelta(days=3), lifetime=datetime.timedelta(days=1))
        kubeconfig(tmp_path / "kubelet.conf", user={"client-certificate-data": base64.b64encode(cert).decode(),
                                                    "client-key-data": base64.b64encode(key).decode()})
    with pytest.raises(bootstrap.BootstrapError) as caught:
        await bootstrap.node_credentials(cluster, "n1", "test")
    assert cluster.kubeconfig in str(caught.value) and "--bootstrap-kubeconfig" in str(caught.value)
    assert ("does not exist" if state == "missing" else "valid only from") in str(caught.value)


async def test_a_valid_certificate_in_the_store_needs_no_new_csr(tmp_path):
    """The kubeconfig was lost (or never written) but the store holds a valid pair: just write it."""
    ca = CA()
    cluster = settings(tmp_path, bootstrap_kubeconfig=kubeconfig(tmp_path / "bootstrap.conf", ca=ca.pem,
                                                                 user={"token": "abcdef.0123456789abcdef"}))
    CertStore(cluster.cert_dir).save(*ca.node_pair())
    creds = await bootstrap.node_credentials(cluster, "n1", "test")
    assert creds.client_pem == CertStore(cluster.cert_dir).current_path
    written = read_kubeconfig(cluster.kubeconfig)
    assert load_pair(written.cert_pem, written.key_pem, "written").cert == CertStore(cluster.cert_dir).current().cert


def test_the_key_of_a_csr_still_waited_on_is_kept_across_restarts(tmp_path):
    """So a restarted agent asks for the same CSR (its name follows the key) instead of a new one;
    a pending key file that does not load is replaced."""
    store = CertStore(str(tmp_path / "pki"))
    first = bootstrap._pending_key(store)
    again = bootstrap._pending_key(store)
    assert csr_keys.bootstrap_csr_name(again, "n1") == csr_keys.bootstrap_csr_name(first, "n1")
    pending = tmp_path / "pki" / bootstrap.PENDING_KEY
    assert stat.S_IMODE(pending.stat().st_mode) == 0o600
    pending.write_bytes(b"-----BEGIN EC PRIVATE KEY-----\ntorn\n")
    replaced = bootstrap._pending_key(store)
    assert csr_keys.bootstrap_csr_name(replaced, "n1") != csr_keys.bootstrap_csr_name(first, "n1")
    assert csr_keys.read_key(pending.read_bytes()) is not None


class FakeCSRApi:
    """The CSR calls of KubeClient: create, get, and a watch that shows each later version once."""

    def __init__(self, decide) -> None:
        self.decide = decide  # csr -> status dict, called once the watch is opened
        self.csrs: dict[str, dict[str, Any]] = {}
        self.created: list[dict[str, Any]] = []

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        name = body["metadata"].get("name") or f"csr-{len(self.created)}"
        if name in self.csrs:
            raise errors.Conflict("POST", path, 409, "AlreadyExists", "exists")
        obj = {**body, "metadata": {"name": name, "resourceVersion": "1"}, "status": {}}
        self.csrs[name] = obj
        self.created.append(obj)
        return obj

    async def get(self, path: str) -> dict[str, Any]:
        return self.csrs[path.rsplit("/", 1)[1]]

    async def watch(self, path: str, query: dict[str, Any], timeout: int):
        name = query["fieldSelector"].removeprefix("metadata.name=")
        csr_ = self.csrs[name]
        csr_["status"] = self.decide(csr_)
        csr_["metadata"]["resourceVersion"] = "2"
        yield {"type": "MODIFIED", "object": csr_}


async def test_an_approved_csr_gives_the_signed_certificate():
    ca = CA()

    def sign(obj):
        request = x509.load_pem_x509_csr(base64.b64decode(obj["spec"]["request"]))
        cert = ca.sign(request.public_key(), request.subject)
        return {"conditions": [{"type": "Approved", "status": "True"}], "certificate": base64.b64encode(cert).decode()}
    api = FakeCSRApi(sign)
    key = csr_keys.new_key()
    pem = await csr.request_certificate(api, csr_keys.csr_pem(key, "n1"), name="node-csr-a", wait_seconds=5)  # type: ignore[arg-type]
    load_pair(pem, key_pem_of(key), "issued")  # the certificate is for our key
    # an agent restarted while waiting finds its own CSR again instead of failing on the name
    assert await csr.request_certificate(api, csr_keys.csr_pem(key, "n1"), name="node-csr-a", wait_seconds=5) == pem  # type: ignore[arg-type]
    assert len(api.created) == 1


async def test_a_denied_csr_is_an_error_naming_it():
    api = FakeCSRApi(lambda obj: {"conditions": [{"type": "Denied", "status": "True", "reason": "NotOurs",
                                                  "message": "an admin said no"}]})
    with pytest.raises(csr.CSRDenied, match="node-csr-b was denied: NotOurs an admin said no"):
        await csr.request_certificate(api, csr_keys.csr_pem(csr_keys.new_key(), "n1"), name="node-csr-b", wait_seconds=5)  # type: ignore[arg-type]


async def test_an_unanswered_csr_times_out_naming_it_and_how_to_approve_it():
    api = FakeCSRApi(lambda obj: {})
    with pytest.raises(csr.CSRTimeout, match=r"node-csr-c .*kubectl certificate approve node-csr-c"):
        await csr.request_certificate(api, csr_keys.csr_pem(csr_keys.new_key(), "n1"), name="node-csr-c", wait_seconds=0.3)  # type: ignore[arg-type]


@pytest.mark.parametrize("error, says", [
    (errors.KubeError("POST", "/x", 401, "Unauthorized", ""), "bootstrap token is wrong or has expired"),
    (errors.KubeError("POST", "/x", 403, "Forbidden", "nope"), "system:node-bootstrapper"),
    (errors.Unreachable("POST", "/x", 0, "ClientConnectorCertificateError",
                        "certificate verify failed: unable to get local issuer certificate"), "not signed by the CA"),
    (errors.Unreachable("POST", "/x", 0, "ClientConnectorError", "Connection refused"), "cannot reach the apiserver"),
])
def test_bootstrap_errors_say_what_is_wrong_and_name_the_file(error, says):
    text = bootstrap.explain(error, "/etc/kubernetes/bootstrap-kubelet.conf")
    assert says in text and "/etc/kubernetes/bootstrap-kubelet.conf" in text


class SigningApi(FakeCSRApi):
    """Signs every CSR with the CA, and counts credential reloads (KubeClient.reload_credentials)."""

    def __init__(self, ca: CA) -> None:
        def sign(obj):
            request = x509.load_pem_x509_csr(base64.b64decode(obj["spec"]["request"]))
            cert = ca.sign(request.public_key(), request.subject)
            return {"conditions": [{"type": "Approved", "status": "True"}],
                    "certificate": base64.b64encode(cert).decode()}
        super().__init__(sign)
        self.reloads = 0

    async def reload_credentials(self) -> None:
        self.reloads += 1


async def test_rotation_stores_a_new_pair_for_a_new_key_and_switches_the_client_to_it(tmp_path):
    from pykubelet.kube.rotation import ClientCertificateRotation

    ca = CA()
    store = CertStore(str(tmp_path / "pki"))
    store.save(*ca.node_pair("n1"))
    before = store.current()
    api = SigningApi(ca)
    await ClientCertificateRotation(api, store, "n1").rotate()  # type: ignore[arg-type]
    after = store.current()
    assert after.key_pem != before.key_pem  # a new key, not a re-signed old one
    assert x509.load_pem_x509_certificate(open(store.current_path, "rb").read()).subject == csr_keys.node_subject("n1")
    assert api.reloads == 1


async def test_a_certificate_expired_beyond_renewal_ends_the_rotation_loop_so_a_restart_bootstraps(tmp_path):
    from pykubelet.kube.rotation import EXIT_AFTER_EXPIRY, CertificateExpired, ClientCertificateRotation

    store = CertStore(str(tmp_path / "pki"))
    rotation = ClientCertificateRotation(FakeCSRApi(lambda obj: {}), store, "n1")  # type: ignore[arg-type]
    with pytest.raises(CertificateExpired, match="could not be renewed"):
        await rotation.rotate(expires=datetime.datetime.now().timestamp() - EXIT_AFTER_EXPIRY - 1)
