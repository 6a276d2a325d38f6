"""The repository an image reference names, fully qualified as the registries' reference grammar
has it ("busybox:1.37" -> "docker.io/library/busybox"): what credentials are looked up for.

Pure: the grammar (domain, path components, tag, digest) of the container image reference and
the Docker Hub normalization the kubelet applies before it looks up credentials.
"""

from __future__ import annotations

import re

DEFAULT_DOMAIN = "docker.io"
LEGACY_DEFAULT_DOMAIN = "index.docker.io"
OFFICIAL_PREFIX = "library/"
NAME_TOTAL_LENGTH_MAX = 255

_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT = f"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[(?:[a-fA-F0-9:]+)\])"
_DOMAIN = rf"{_HOST}(?::[0-9]+)?"
_NAME = rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*[:][0-9a-fA-F]{32,}"
_REFERENCE = re.compile(rf"({_NAME})(?::({_TAG}))?(?:@({_DIGEST}))?", re.ASCII)
_IDENTIFIER = re.compile(r"[a-f0-9]{64}")


class ImageNameError(ValueError):
    """The image is no valid reference: the message says why, as the kubelet words it."""


def _split_domain(name: str) -> tuple[str, str]:
    """(domain, rest) with Docker Hub's defaults filled in: "ubuntu" -> docker.io, library/ubuntu."""
    first, slash, rest = name.partition("/")
    if not slash:
        return DEFAULT_DOMAIN, OFFICIAL_PREFIX + name
    if first == "localhost" or any(c in first for c in ".:") or first.lower() != first:
        # A host, an IP or host:port (upper case is never a namespace); the legacy Hub name is Hub.
        domain, remainder = (DEFAULT_DOMAIN if first == LEGACY_DEFAULT_DOMAIN else first), rest
    else:
        domain, remainder = DEFAULT_DOMAIN, name
    if domain == DEFAULT_DOMAIN and "/" not in remainder:
        remainder = OFFICIAL_PREFIX + remainder
    return domain, remainder


def repository(image: str) -> str:
    """The fully qualified repository of `image`, without tag or digest."""
    def invalid(why: str) -> ImageNameError:
        return ImageNameError(f"couldn't parse image name {image!r}: {why}")
    if _IDENTIFIER.fullmatch(image):
        raise invalid(f"invalid repository name ({image}), cannot specify 64-byte hexadecimal strings")
    domain, remainder = _split_domain(image)
    remote = remainder.split(":", 1)[0]
    if remote.lower() != remote:
        raise invalid(f"invalid reference format: repository name ({remote}) must be lowercase")
    match = _REFERENCE.fullmatch(f"{domain}/{remainder}")
    if match is None:
        raise invalid("invalid reference format")
    name = match.group(1)
    if len(name) > NAME_TOTAL_LENGTH_MAX:
        raise invalid(f"repository name must not be more than {NAME_TOTAL_LENGTH_MAX} characters")
    return name


def registry_of(image: str) -> str:
    """The text before the first "/": the registry of a qualified repository (a plugin's cache key)."""
    return image.split("/", 1)[0]
