"""The kubelet API's serving certificate: self-signed for the node once, then reused."""

from __future__ import annotations

import ssl

from cryptography import x509

from pykubelet.config import ServerSettings
from pykubelet.server import tls


def test_self_signed_certificate_is_made_once_and_reused(tmp_path):
    cert, key = tls.serving_files(ServerSettings(), str(tmp_path / "pki"), "node-a", ["10.1.2.3"])
    first = open(cert, "rb").read()
    loaded = x509.load_pem_x509_certificate(first)
    sans = loaded.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["node-a"]
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["10.1.2.3"]
    assert (tmp_path / "pki" / "kubelet.key").stat().st_mode & 0o777 == 0o600
    assert tls.serving_files(ServerSettings(), str(tmp_path / "pki"), "node-a", ["10.1.2.3"]) == (cert, key)
    assert open(cert, "rb").read() == first


def test_context_honours_min_version_and_client_ca(tmp_path):
    cert, key = tls.serving_files(ServerSettings(), str(tmp_path / "pki"), "n", [])
    context = tls.server_context(ServerSettings(tls_min_version="VersionTLS13"), cert, key, cert)
    assert context.minimum_version == ssl.TLSVersion.TLSv1_3 and context.verify_mode == ssl.CERT_OPTIONAL
    assert tls.server_context(ServerSettings(), cert, key, "").verify_mode == ssl.CERT_NONE


def test_unreadable_files_name_the_file(tmp_path):
    try:
        tls.server_context(ServerSettings(), str(tmp_path / "nope.crt"), str(tmp_path / "nope.key"), "")
    except tls.TLSError as e:
        assert "nope.crt" in str(e)
    else:
        raise AssertionError("expected TLSError")


async def test_the_self_signed_certificate_goes_to_the_cert_dir(tmp_path):
    """--cert-dir is where the kubelet keeps its certificates, the self-signed serving pair included."""
    from pykubelet.config import build_parser, settings_from_args
    from pykubelet.server import kubelet_api
    from pykubelet.server.host import Host

    settings = settings_from_args(build_parser().parse_args(
        ["--root-dir", str(tmp_path / "root"), "--cert-dir", str(tmp_path / "certs"), "--address", "127.0.0.1",
         "--port", "0"]))
    api = await kubelet_api.start(Host(settings, None, [], lambda: []))  # type: ignore[arg-type]
    await api.close()
    assert sorted(p.name for p in (tmp_path / "certs").iterdir()) == ["kubelet.crt", "kubelet.key"]
    assert not (tmp_path / "root" / "pki").exists()
