"""The few fields of an X.509 certificate the node decides with, read with the standard library.

The agent reads its client certificate at every start (is it valid now, when is it rotated) and a
serving certificate whenever it loads one. cryptography reads them too, but importing it costs
the process 8 MiB of RSS and ~40 ms of CPU, for as long as it runs; the agent needs cryptography
only to make a key or a CSR (TLS bootstrap, and a rotation once it falls due), so it imports it
only then.

What is read: the validity window, the subject's common names and organizations, and the DNS
and IP subject alternative names. A certificate is DER (RFC 5280 §4.1): nested tag-length-value
elements, of which these fields need only SEQUENCEs, SETs, OIDs, strings and times. Everything
else is skipped by its length. Whether a private key belongs to the certificate is OpenSSL's
check, made the way a TLS context loads the pair (`key_matches`).
"""

from __future__ import annotations

import base64
import binascii
import datetime
import ipaddress
import os
import re
import ssl
from dataclasses import dataclass

_CERTIFICATE = re.compile(rb"-----BEGIN CERTIFICATE-----\s*(.*?)\s*-----END CERTIFICATE-----", re.DOTALL)
_PRIVATE_KEY = re.compile(rb"-----BEGIN ((?:EC |RSA |ENCRYPTED )?PRIVATE KEY)-----.*?-----END \1-----", re.DOTALL)

# DER tags (X.690) and the OIDs' encoded bodies (X.520, RFC 5280)
SEQUENCE, SET, OID, OCTET_STRING = 0x30, 0x31, 0x06, 0x04
UTC_TIME, GENERALIZED_TIME = 0x17, 0x18
EXPLICIT_VERSION, EXPLICIT_EXTENSIONS = 0xA0, 0xA3
SAN_DNS_NAME, SAN_IP_ADDRESS = 0x82, 0x87  # GeneralName's [2] and [7], implicit
COMMON_NAME, ORGANIZATION = bytes.fromhex("550403"), bytes.fromhex("55040a")
SUBJECT_ALT_NAME = bytes.fromhex("551d11")
_STRING_CODECS = {0x0C: "utf-8", 0x13: "ascii", 0x16: "ascii", 0x14: "latin-1", 0x1E: "utf-16-be"}


class CertificateFormatError(ValueError):
    """Not a PEM certificate this module can read; the message says what is wrong with it."""


@dataclass(frozen=True)
class CertificateFields:
    not_before: float
    """Seconds since the epoch."""
    not_after: float
    common_names: tuple[str, ...]
    organizations: tuple[str, ...]
    dns_names: tuple[str, ...]
    ips: tuple[str, ...]
    """Each as ipaddress prints it."""

    def valid_at(self, when: float) -> bool:
        return self.not_before <= when < self.not_after


def first_certificate_der(pem: bytes) -> bytes:
    """The DER of the first CERTIFICATE block in pem."""
    match = _CERTIFICATE.search(pem)
    if match is None:
        raise CertificateFormatError("no PEM certificate")
    try:
        return base64.b64decode(match.group(1), validate=False)
    except (binascii.Error, ValueError) as e:
        raise CertificateFormatError(f"the PEM certificate is not base64: {e}") from None


def private_key_pem(pem: bytes) -> bytes:
    """The first private key block of pem, as it is there; b"" if there is none."""
    match = _PRIVATE_KEY.search(pem)
    return match.group(0) + b"\n" if match else b""


def read(pem: bytes) -> CertificateFields:
    """The fields of the first certificate in pem."""
    der = first_certificate_der(pem)
    try:
        return _fields(der)
    except (IndexError, ValueError, UnicodeDecodeError) as e:
        raise CertificateFormatError(f"the certificate is not valid DER: {e}") from None


def key_matches(cert_pem: bytes, key_pem: bytes) -> bool:
    """Whether key_pem holds an unencrypted private key for the first certificate of cert_pem.

    OpenSSL's own check (SSL_CTX_use_PrivateKey), through files that live only in memory: the
    ssl module loads a pair only from paths, and the key must not be written anywhere else."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    cert_fd, key_fd = _memory_file(cert_pem), _memory_file(key_pem)
    try:
        # An encrypted key would make OpenSSL prompt on the terminal without a password callback.
        context.load_cert_chain(f"/proc/self/fd/{cert_fd}", f"/proc/self/fd/{key_fd}", password=lambda: b"")
        return True
    except ssl.SSLError:
        return False
    finally:
        os.close(cert_fd)
        os.close(key_fd)


def _memory_file(data: bytes) -> int:
    fd = os.memfd_create("pykubelet-pem", os.MFD_CLOEXEC)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    return fd


def _element(der: bytes, pos: int) -> tuple[int, int, int]:
    """(tag, start, end) of the value of the element at pos."""
    if pos + 2 > len(der):
        raise ValueError(f"an element is cut short at byte {pos}")
    tag, first = der[pos], der[pos + 1]
    pos += 2
    if first & 0x80:
        count = first & 0x7F
        if not 1 <= count <= 4 or pos + count > len(der):
            raise ValueError(f"an element's length at byte {pos - 1} is not DER")
        length = int.from_bytes(der[pos:pos + count], "big")
        pos += count
    else:
        length = first
    if pos + length > len(der):
        raise ValueError(f"an element at byte {pos} runs past the end")
    return tag, pos, pos + length


def _children(der: bytes, start: int, end: int) -> list[tuple[int, int, int]]:
    children = []
    while start < end:
        child = _element(der, start)
        if child[2] > end:
            raise ValueError(f"an element at byte {start} runs past its parent")
        children.append(child)
        start = child[2]
    return children


def _expect(element: tuple[int, int, int], tag: int, what: str) -> tuple[int, int, int]:
    if element[0] != tag:
        raise ValueError(f"{what}: tag 0x{element[0]:02x}, not 0x{tag:02x}")
    return element


def _fields(der: bytes) -> CertificateFields:
    _, start, end = _expect(_element(der, 0), SEQUENCE, "the certificate")
    _, start, end = _expect(_children(der, start, end)[0], SEQUENCE, "tbsCertificate")
    tbs = _children(der, start, end)
    if tbs and tbs[0][0] == EXPLICIT_VERSION:
        tbs = tbs[1:]
    # serialNumber, signature, issuer, validity, subject, subjectPublicKeyInfo, then optional parts
    validity = _children(der, *_expect(tbs[3], SEQUENCE, "validity")[1:])
    subject = _expect(tbs[4], SEQUENCE, "subject")
    names = _name_attributes(der, subject)
    dns_names: list[str] = []
    ips: list[str] = []
    for tag, ext_start, ext_end in tbs[6:]:
        if tag == EXPLICIT_EXTENSIONS:
            dns_names, ips = _alt_names(der, ext_start, ext_end)
    return CertificateFields(
        not_before=_time(der, validity[0]), not_after=_time(der, validity[1]),
        common_names=tuple(value for oid, value in names if oid == COMMON_NAME),
        organizations=tuple(value for oid, value in names if oid == ORGANIZATION),
        dns_names=tuple(dns_names), ips=tuple(ips))


def _name_attributes(der: bytes, name: tuple[int, int, int]) -> list[tuple[bytes, str]]:
    """(OID body, value) of each attribute of a Name: SEQUENCE OF SET OF SEQUENCE {OID, value}."""
    attributes = []
    for rdn in _children(der, name[1], name[2]):
        for attribute in _children(der, *_expect(rdn, SET, "a name's RDN")[1:]):
            oid, value = _children(der, *_expect(attribute, SEQUENCE, "a name attribute")[1:])[:2]
            _expect(oid, OID, "a name attribute's type")
            codec = _STRING_CODECS.get(value[0])
            if codec is not None:
                attributes.append((der[oid[1]:oid[2]], der[value[1]:value[2]].decode(codec)))
    return attributes


def _alt_names(der: bytes, start: int, end: int) -> tuple[list[str], list[str]]:
    """The DNS names and IPs of the subjectAltName extension, if the [3] extensions hold one."""
    _, start, end = _expect(_children(der, start, end)[0], SEQUENCE, "extensions")
    for extension in _children(der, start, end):
        parts = _children(der, *_expect(extension, SEQUENCE, "an extension")[1:])
        if der[parts[0][1]:parts[0][2]] != SUBJECT_ALT_NAME:
            continue
        value = _expect(parts[-1], OCTET_STRING, "subjectAltName's value")
        _, names_start, names_end = _expect(_element(der, value[1]), SEQUENCE, "GeneralNames")
        dns_names, ips = [], []
        for tag, name_start, name_end in _children(der, names_start, names_end):
            if tag == SAN_DNS_NAME:
                dns_names.append(der[name_start:name_end].decode("ascii"))
            elif tag == SAN_IP_ADDRESS:
                ips.append(str(ipaddress.ip_address(der[name_start:name_end])))
        return dns_names, ips
    return [], []


def _time(der: bytes, element: tuple[int, int, int]) -> float:
    """UTCTime (two-digit years: 50–99 are 19xx, RFC 5280 §4.1.2.5.1) or GeneralizedTime, in UTC."""
    tag, start, end = element
    text = der[start:end].decode("ascii")
    if tag == UTC_TIME:
        text = ("19" if int(text[:2]) >= 50 else "20") + text
    elif tag != GENERALIZED_TIME:
        raise ValueError(f"a validity time: tag 0x{tag:02x}")
    when = datetime.datetime.strptime(text, "%Y%m%d%H%M%SZ").replace(tzinfo=datetime.timezone.utc)
    return when.timestamp()
