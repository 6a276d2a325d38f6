"""Which credentials apply to an image, as the kubelet's keyring decides.

Each registry key of a docker config ("registry.example.com", "https://index.docker.io/v1/",
"quay.io/team", "*.example.com:5000") is stored as host[:port][/path] (scheme dropped, a /v1/ or
/v2/ API prefix cut). A repository ("docker.io/library/busybox") is matched against every key,
most specific first (keys in reverse lexical order): the port must be equal, the host must have
as many dot-separated labels as the key and each label match the key's label as a shell glob,
and the key's path must be a prefix of the repository's. All matching keys contribute, each with
all its credentials in the order they were added. When none matches and the image is on Docker
Hub, the credentials stored for index.docker.io apply. Pure.
"""

from __future__ import annotations

import re
from typing import Iterable, NamedTuple

from pykubelet.runtime.credentials.docker_config import Credential

DEFAULT_REGISTRY_HOST = "index.docker.io"
_COLON_PORT = re.compile(r"(?::[0-9]*)?")
# What a URL's host may hold besides letters and digits (Go's net/url; "*" and "[...]" make globs).
_HOST_PUNCTUATION = "-._~%!$&'()*+,;=:[]<>\""


class _Url(NamedTuple):
    labels: list[str]
    port: str
    path: str


def _host_and_path(url: str) -> tuple[str, str] | None:
    """(host[:port], path) of an absolute URL, None when Go's URL parser would refuse it."""
    if any(ord(c) < 0x20 or c in " \x7f" for c in url):
        return None
    # Cut as Go's net/url cuts: the fragment, the query, then the authority up to the path.
    rest = url.partition("#")[0].partition("?")[0].split("://", 1)[1]
    authority, slash, path = rest.partition("/")
    host, path = authority.rpartition("@")[2], slash + path
    if host.startswith("["):  # an IPv6 literal, then only an optional port
        address, bracket, after = host.partition("]")
        if not bracket or not _COLON_PORT.fullmatch(after):
            return None
    elif any(c < "\x80" and not (c.isalnum() or c in _HOST_PUNCTUATION) for c in host) or \
            ":" in host and not _COLON_PORT.fullmatch(host[host.rindex(":"):]):
        return None
    return host, path


def _split(host_and_path: tuple[str, str]) -> _Url:
    host, path = host_and_path
    port = ""
    if host.startswith("["):  # [v6]:port
        address, _, rest = host[1:].partition("]")
        host, port = address, rest[1:] if rest.startswith(":") else ""
    elif host.count(":") == 1:
        host, port = host.split(":")
    return _Url(host.split("."), port, path)


def _glob(pattern: str) -> re.Pattern[str] | None:
    """A shell glob as Go's filepath.Match reads it ('*', '?', '[a-z]', '[^x]', '\\' escapes);
    None for a malformed one (which matches nothing)."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "\\":
            if i + 1 == len(pattern):
                return None
            i += 1
            out.append(re.escape(pattern[i]))
        elif c == "[":
            end = pattern.find("]", i + 2 if pattern[i + 1:i + 2] == "^" else i + 1)
            if end < 0:
                return None
            body = pattern[i + 1:end]
            negate = body.startswith("^")
            body = body[1:] if negate else body
            if not body:
                return None
            escaped = "".join("\\" + ch if ch in "\\[]^" else ch for ch in body)
            out.append(f"[{'^' if negate else ''}{escaped}]")
            i = end
        else:
            out.append(re.escape(c))
        i += 1
    try:
        return re.compile("".join(out))
    except re.error:
        return None


def urls_match(glob: str, target: str) -> bool:
    """Whether `target` (a schemeless repository) falls under `glob` (a schemeless key)."""
    parsed_glob, parsed_target = _host_and_path("https://" + glob), _host_and_path("https://" + target)
    if parsed_glob is None or parsed_target is None:
        return False
    key, image = _split(parsed_glob), _split(parsed_target)
    if key.port != image.port or len(key.labels) != len(image.labels) or not image.path.startswith(key.path):
        return False
    for pattern, label in zip(key.labels, image.labels):
        compiled = _glob(pattern)
        if compiled is None or not compiled.fullmatch(label):
            return False
    return True


def valid_glob_url(glob: str) -> bool:
    """Whether a matchImages entry parses as a (schemeless) URL, as the kubelet requires."""
    return _host_and_path("https://" + glob) is not None


def is_default_registry(image: str) -> bool:
    """Whether the image is pulled from Docker Hub, judged by its name."""
    first, slash, _ = image.partition("/")
    if not first:
        return False
    return not slash or first in ("docker.io", DEFAULT_REGISTRY_HOST) or not any(c in first for c in ".:")


def index_key(registry: str) -> str | None:
    """The key a docker config's registry entry is stored under; None for one that is no URL."""
    url = registry if registry.startswith(("https://", "http://")) else "https://" + registry
    parsed = _host_and_path(url)
    if parsed is None:
        return None
    host, path = parsed
    if path.startswith(("/v2/", "/v1/")):
        path = path[3:]
    return host + path if path and path != "/" else host


class Keyring:
    """Credentials by registry key, looked up for a repository."""

    def __init__(self, entries: Iterable[tuple[str, Credential]] = ()):
        self._creds: dict[str, list[Credential]] = {}
        self.add(entries)

    def add(self, entries: Iterable[tuple[str, Credential]]) -> None:
        for registry, credential in entries:
            key = index_key(registry)
            if key is not None:  # the kubelet logs and skips such an entry
                self._creds.setdefault(key, []).append(credential)

    def lookup(self, repository: str) -> list[Credential]:
        """Every credential that applies to the repository, most specific key first."""
        found = [c for key in sorted(self._creds, reverse=True) if urls_match(key, repository)
                 for c in self._creds[key]]
        if not found and is_default_registry(repository):
            return list(self._creds.get(DEFAULT_REGISTRY_HOST, []))
        return found
