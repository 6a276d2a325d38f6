"""util/x509_fields.py reads what cryptography reads from the same certificates (cryptography makes
them here), checks a key against its certificate as OpenSSL does, and turns any other input into
a CertificateFormatError."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import random

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from pykubelet.util import x509_fields
from pykubelet.util.x509_fields import CertificateFormatError

UTC = datetime.timezone.utc


def make(key=None, *, names=(("O", "system:nodes"), ("CN", "system:node:n1")), sans=(),
         start=datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
         end=datetime.datetime(2027, 1, 2, 3, 4, 5, tzinfo=UTC)) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM), self-signed."""
    key = key or ec.generate_private_key(ec.SECP256R1())
    oids = {"CN": NameOID.COMMON_NAME, "O": NameOID.ORGANIZATION_NAME, "C": NameOID.COUNTRY_NAME}
    name = x509.Name([x509.NameAttribute(oids[kind], value) for kind, value in names])
    builder = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end))
    if sans:
        builder = builder.add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    cert = builder.sign(key, hashes.SHA256())
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                serialization.NoEncryption())
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def test_the_fields_are_what_cryptography_reads():
    cert_pem, _ = make(names=(("C", "DE"), ("O", "system:nodes"), ("O", "team-ä"), ("CN", "system:node:n1")),
                       sans=(x509.DNSName("node-a.example"), x509.IPAddress(ipaddress.ip_address("10.0.0.5")),
                             x509.IPAddress(ipaddress.ip_address("fd00::5")), x509.DNSName("node-a"),
                             x509.UniformResourceIdentifier("spiffe://x/y")))
    fields = x509_fields.read(cert_pem)
    theirs = x509.load_pem_x509_certificate(cert_pem)
    assert fields.not_before == theirs.not_valid_before_utc.timestamp()
    assert fields.not_after == theirs.not_valid_after_utc.timestamp()
    assert fields.common_names == ("system:node:n1",)
    assert fields.organizations == ("system:nodes", "team-ä")
    assert fields.dns_names == ("node-a.example", "node-a")  # in the certificate's order; the URI skipped
    assert fields.ips == ("10.0.0.5", "fd00::5")


def test_years_from_2050_are_generalized_time_and_before_utc_time():
    """RFC 5280: UTCTime through 2049 (two-digit years 50-99 are 19xx), GeneralizedTime after."""
    cert_pem, _ = make(start=datetime.datetime(1999, 12, 31, 23, 59, 59, tzinfo=UTC),
                       end=datetime.datetime(2051, 6, 1, tzinfo=UTC))
    fields = x509_fields.read(cert_pem)
    assert fields.not_before == datetime.datetime(1999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()
    assert fields.not_after == datetime.datetime(2051, 6, 1, tzinfo=UTC).timestamp()
    assert fields.valid_at(fields.not_before) and not fields.valid_at(fields.not_after)


def test_no_alternative_names_and_the_first_certificate_of_a_combined_file():
    cert_pem, key_pem = make()
    other, _ = make(names=(("CN", "someone-else"),))
    fields = x509_fields.read(key_pem + cert_pem + other)  # the cert store's file: certificate and key
    assert fields.common_names == ("system:node:n1",) and fields.dns_names == () and fields.ips == ()


@pytest.mark.parametrize("key", [ec.generate_private_key(ec.SECP256R1()), rsa.generate_private_key(65537, 2048)],
                         ids=["ecdsa", "rsa"])
def test_the_key_of_the_certificate_matches_and_any_other_does_not(key):
    cert_pem, key_pem = make(key)
    _, other_key = make()
    assert x509_fields.key_matches(cert_pem, key_pem)
    assert x509_fields.key_matches(cert_pem + key_pem, cert_pem + key_pem)  # one file holding both
    assert not x509_fields.key_matches(cert_pem, other_key)
    assert not x509_fields.key_matches(cert_pem, b"not a key")


def test_an_encrypted_key_does_not_match_and_nothing_asks_for_its_password():
    key = ec.generate_private_key(ec.SECP256R1())
    cert_pem, _ = make(key)
    encrypted = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.BestAvailableEncryption(b"secret"))
    assert x509_fields.private_key_pem(cert_pem + encrypted).startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----")
    assert not x509_fields.key_matches(cert_pem, encrypted)  # OpenSSL would prompt on the terminal without a callback


def test_the_key_block_is_taken_as_it_is_from_a_combined_file():
    cert_pem, key_pem = make()
    assert x509_fields.private_key_pem(cert_pem + key_pem) == key_pem
    assert x509_fields.private_key_pem(cert_pem) == b""


@pytest.mark.parametrize("pem, message", [
    (b"", "no PEM certificate"),
    (b"-----BEGIN CERTIFICATE-----\nMAA=\n-----END CERTIFICATE-----\n", "not valid DER"),
    (b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n", "not valid DER"),
])
def test_what_is_not_a_certificate_is_a_format_error_saying_why(pem, message):
    with pytest.raises(CertificateFormatError, match=message):
        x509_fields.read(pem)


def test_corrupted_certificates_give_a_format_error_or_fields_and_never_another_exception():
    """A file on disk can hold anything: every corruption of a real certificate's DER is either
    still read or refused with CertificateFormatError (which the callers name the file with)."""
    cert_pem, _ = make(sans=(x509.DNSName("a"), x509.IPAddress(ipaddress.ip_address("10.0.0.1"))))
    der = bytearray(x509_fields.first_certificate_der(cert_pem))
    rng = random.Random(31)
    refused = 0
    for _ in range(3000):
        broken = bytearray(der)
        for _ in range(rng.randint(1, 3)):
            broken[rng.randrange(len(broken))] = rng.randrange(256)
        if rng.random() < 0.3:
            broken = broken[:rng.randrange(len(broken))]
        pem = b"-----BEGIN CERTIFICATE-----\n" + base64.encodebytes(bytes(broken)) + b"-----END CERTIFICATE-----\n"
        try:
            x509_fields.read(pem)
        except CertificateFormatError:
            refused += 1
    assert refused > 500  # the corruptions did reach the parser's checks
