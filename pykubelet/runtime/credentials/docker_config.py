"""Registry credentials out of docker config JSON: the data of an image pull Secret
(`kubernetes.io/dockerconfigjson`: {"auths": {registry: entry}}; `kubernetes.io/dockercfg`:
{registry: entry}) and the `auth` map of a credential provider plugin's response.

An entry is {username, password, email, auth}; a non-empty `auth` (base64 of "user:password",
padded or not) wins over username and password, as for the kubelet. Field names match without
regard to case, as Go's JSON decoding matches them. Pure; errors name the secret and the field,
never a credential.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Any

DOCKER_CONFIG_JSON = ("kubernetes.io/dockerconfigjson", ".dockerconfigjson")
DOCKERCFG = ("kubernetes.io/dockercfg", ".dockercfg")
_ENTRY_FIELDS = ("username", "password", "email", "auth")


@dataclass(frozen=True)
class Credential:
    """One username and password for a registry, and where it came from (for logs: never the password)."""

    username: str
    password: str = field(repr=False)
    source: str = ""
    """'secret "<namespace>/<name>"', 'plugin "<name>"': what the logs and errors may name."""


class DockerConfigError(ValueError):
    """Docker config JSON that cannot be read; the message names the object and the field."""


def _fields(obj: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """The object's values of these fields, keys matched case-insensitively (the last one wins)."""
    out: dict[str, Any] = {}
    for key, value in obj.items():
        if key.lower() in names:
            out[key.lower()] = value
    return out


def decode_auth(value: str) -> tuple[str, str]:
    """(username, password) from an `auth` field: base64("user:password"), padded or unpadded."""
    padded = value.strip().endswith("=")
    try:
        decoded = base64.b64decode(value if padded else value + "=" * (-len(value) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("illegal base64 data") from None
    username, colon, password = decoded.decode("utf-8", "replace").partition(":")
    if not colon:
        raise ValueError("unable to parse auth field, must be formatted as base64(username:password)")
    return username, password


def entry_credential(entry: Any, path: str, source: str) -> Credential:
    """The credential of one entry; `path` names it in errors."""
    if entry is None:
        return Credential("", "", source)
    if not isinstance(entry, dict):
        raise DockerConfigError(f"{path}: must be an object")
    values = _fields(entry, _ENTRY_FIELDS)
    for name, value in values.items():
        if value is not None and not isinstance(value, str):
            raise DockerConfigError(f"{path}.{name}: must be a string")
    if values.get("auth"):
        try:
            username, password = decode_auth(values["auth"])
        except ValueError as e:
            raise DockerConfigError(f"{path}.auth: {e}") from None
        return Credential(username, password, source)
    return Credential(values.get("username") or "", values.get("password") or "", source)


def registry_entries(config: Any, path: str, source: str) -> list[tuple[str, Credential]]:
    """(registry key, credential) of a {registry: entry} object, in its order."""
    if config is None:
        return []
    if not isinstance(config, dict):
        raise DockerConfigError(f"{path}: must be an object of registry entries")
    return [(key, entry_credential(entry, f"{path}[{json.dumps(key)}]", source)) for key, entry in config.items()]


def secret_entries(secret: dict[str, Any]) -> list[tuple[str, Credential]] | None:
    """The registry entries of an image pull Secret; None for a Secret of another type (or
    without its key, or with it empty): the kubelet skips those."""
    meta = secret.get("metadata") if isinstance(secret.get("metadata"), dict) else {}
    source = f'secret "{meta.get("namespace", "")}/{meta.get("name", "")}"'
    data = secret.get("data") if isinstance(secret.get("data"), dict) else {}
    for secret_type, key in (DOCKER_CONFIG_JSON, DOCKERCFG):
        if secret.get("type") != secret_type or not data.get(key):
            continue
        path = f"{source}: data[{key}]"
        try:
            raw = json.loads(base64.b64decode(data[key], validate=True))
        except json.JSONDecodeError as e:  # its position only: the document holds credentials
            raise DockerConfigError(f"{path}: not base64-encoded JSON ({e.msg} at line {e.lineno} column "
                                    f"{e.colno})") from None
        except (binascii.Error, ValueError, TypeError):
            raise DockerConfigError(f"{path}: not base64-encoded JSON") from None
        if key == DOCKERCFG[1]:
            return registry_entries(raw, path, source)
        if not isinstance(raw, dict):
            raise DockerConfigError(f"{path}: must be an object with \"auths\"")
        return registry_entries(_fields(raw, ("auths",)).get("auths"), f"{path}.auths", source)
    return None
