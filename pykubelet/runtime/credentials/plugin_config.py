"""The CredentialProviderConfig of --image-credential-provider-config (kubelet.config.k8s.io/v1,
v1beta1 or v1alpha1): a file, or a directory whose *.json, *.yaml and *.yml files are merged in
lexical order. Checked as the kubelet checks it at start; every error names the file and the
field. Reading is blocking file I/O: callers run `load` off the event loop.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from pykubelet.runtime.credentials.keyring import valid_glob_url
from pykubelet.util import yamlfile
from pykubelet.util.durations import parse_duration

CONFIG_API_VERSIONS = tuple(f"kubelet.config.k8s.io/{v}" for v in ("v1", "v1beta1", "v1alpha1"))
PLUGIN_API_VERSIONS = tuple(f"credentialprovider.kubelet.k8s.io/{v}" for v in ("v1", "v1alpha1", "v1beta1"))


class CredentialProviderConfigError(ValueError):
    """The credential provider configuration cannot be used; the agent does not start."""


@dataclass(frozen=True)
class ProviderSpec:
    """One exec plugin: run <bin dir>/<name> <args> with `env` over the agent's environment."""

    name: str
    match_images: tuple[str, ...]
    default_cache_duration: float
    api_version: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()


def _strings(value: Any, path: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CredentialProviderConfigError(f"{path}: must be a list of strings")
    return tuple(value)


def _provider(raw: Any, path: str) -> ProviderSpec:
    if not isinstance(raw, dict):
        raise CredentialProviderConfigError(f"{path}: must be an object")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise CredentialProviderConfigError(f"{path}.name: Required value")
    for bad, why in (("/", "cannot contain '/'"), (" ", "cannot contain spaces")):
        if bad in name:
            raise CredentialProviderConfigError(f'{path}.name: Invalid value: "{name}": provider name {why}')
    if name in (".", ".."):
        raise CredentialProviderConfigError(f"{path}.name: Invalid value: \"{name}\": provider name cannot be '{name}'")
    api_version = raw.get("apiVersion")
    if not api_version:
        raise CredentialProviderConfigError(f"{path}.apiVersion: Required value")
    if api_version not in PLUGIN_API_VERSIONS:
        raise CredentialProviderConfigError(f'{path}.apiVersion: Unsupported value: "{api_version}": supported '
                                            f"values: {', '.join(sorted(PLUGIN_API_VERSIONS))}")
    match_images = _strings(raw.get("matchImages"), f"{path}.matchImages")
    if not match_images:
        raise CredentialProviderConfigError(f"{path}.matchImages: Required value: at least 1 item in matchImages "
                                            "is required")
    for image in match_images:
        if not valid_glob_url(image):
            raise CredentialProviderConfigError(f'{path}.matchImages: Invalid value: "{image}": match image is '
                                                "invalid")
    if raw.get("defaultCacheDuration") is None:
        raise CredentialProviderConfigError(f"{path}.defaultCacheDuration: Required value")
    try:
        cache_seconds = parse_duration(raw["defaultCacheDuration"])
    except ValueError as e:
        raise CredentialProviderConfigError(f"{path}.defaultCacheDuration: {e}") from None
    if cache_seconds < 0:
        raise CredentialProviderConfigError(f"{path}.defaultCacheDuration: must be greater than or equal to 0")
    if raw.get("tokenAttributes") is not None:
        raise CredentialProviderConfigError(f"{path}.tokenAttributes: service account tokens for credential "
                                            "providers are not supported by pykubelet")
    env = raw.get("env") or []
    if not isinstance(env, list) or not all(isinstance(e, dict) and isinstance(e.get("name"), str)
                                            and isinstance(e.get("value", ""), str) for e in env):
        raise CredentialProviderConfigError(f"{path}.env: must be a list of {{name, value}} strings")
    return ProviderSpec(name, match_images, cache_seconds, api_version, _strings(raw.get("args"), f"{path}.args"),
                        tuple((e["name"], e.get("value", "")) for e in env))


def _decode(path: str) -> list[Any]:
    doc = yamlfile.read_yaml(path, "credential provider config", CredentialProviderConfigError)
    if not isinstance(doc, dict):
        raise CredentialProviderConfigError(f"{path}: must be a CredentialProviderConfig object")
    if doc.get("kind") != "CredentialProviderConfig":
        raise CredentialProviderConfigError(f"{path}: failed to decode {doc.get('kind')!r} (wrong Kind)")
    if doc.get("apiVersion") not in CONFIG_API_VERSIONS:
        raise CredentialProviderConfigError(f"{path}: apiVersion must be one of {', '.join(CONFIG_API_VERSIONS)}, "
                                            f"got {doc.get('apiVersion')!r}")
    providers = doc.get("providers") or []
    if not isinstance(providers, list):
        raise CredentialProviderConfigError(f"{path}: providers: must be a list")
    return providers


def _files(config_path: str) -> list[str]:
    if not os.path.isdir(config_path):
        return [config_path]
    files = sorted(os.path.join(config_path, n) for n in os.listdir(config_path)
                   if os.path.splitext(n)[1] in (".json", ".yaml", ".yml")
                   and not os.path.isdir(os.path.join(config_path, n)))
    if not files:
        raise CredentialProviderConfigError(f'no configuration files found in directory "{config_path}"')
    return files


def load(config_path: str, bin_dir: str) -> list[ProviderSpec]:
    """The providers, in order, each with its program present in `bin_dir`."""
    if not os.path.isdir(bin_dir):
        named = bin_dir or "(--image-credential-provider-bin-dir unset)"
        raise CredentialProviderConfigError(f"plugin binary directory {named} did not exist")
    try:
        files = _files(config_path)
    except OSError as e:
        raise CredentialProviderConfigError(f'unable to access path "{config_path}": {e.strerror}') from None
    providers: list[ProviderSpec] = []
    for path in files:
        for i, raw in enumerate(_decode(path)):
            provider = _provider(raw, f"{path}: providers[{i}]")
            if any(p.name == provider.name for p in providers):
                raise CredentialProviderConfigError(f'{path}: duplicate provider name "{provider.name}"')
            program = os.path.join(bin_dir, provider.name)
            if not (os.path.isfile(program) and os.access(program, os.X_OK)):
                raise CredentialProviderConfigError(f"plugin binary executable {program} did not exist")
            providers.append(provider)
    if not providers:
        raise CredentialProviderConfigError(f"{config_path}: providers: Required value: at least 1 item in plugins "
                                            "is required")
    return providers
