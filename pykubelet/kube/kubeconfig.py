"""Reading the parts of a kubeconfig TLS bootstrap needs, and writing the node's own.

kubernetes_asyncio loads kubeconfigs to talk to the apiserver; this module only answers the
questions bootstrap asks before that (which server and CA, which client certificate, does it
still load) and writes the kubeconfig the kubelet writes after bootstrap: cluster `default-cluster`
(server and CA copied from the bootstrap kubeconfig), user `default-auth` whose certificate and key
are both the cert store's kubelet-client-current.pem, context `default-context`.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass
from typing import Any

import yaml

from pykubelet.util import durable
from pykubelet.util.yamlfile import read_yaml


class KubeconfigError(ValueError):
    """A kubeconfig that cannot be used; the message names the file and the field."""


@dataclass(frozen=True)
class Kubeconfig:
    path: str
    server: str
    ca_pem: bytes
    """certificate-authority(-data); empty: the system's trust store."""
    ca_file: str
    """certificate-authority as written (absolute), to copy it by reference."""
    insecure: bool
    cert_pem: bytes
    """client-certificate(-data); empty: the user authenticates otherwise (token, exec...)."""
    key_pem: bytes
    token: str

    @property
    def has_client_cert(self) -> bool:
        return bool(self.cert_pem)


def _file_or_data(path: str, obj: dict[str, Any], name: str) -> tuple[bytes, str]:
    """(content, absolute file or "") of `name` / `name-data`; relative files are relative to the kubeconfig."""
    data = obj.get(f"{name}-data")
    if data:
        try:
            return base64.b64decode(data, validate=True), ""
        except (ValueError, TypeError):
            raise KubeconfigError(f"{path}: field {name}-data: not valid base64") from None
    ref = obj.get(name)
    if not ref:
        return b"", ""
    full = ref if os.path.isabs(ref) else os.path.join(os.path.dirname(path), ref)
    try:
        with open(full, "rb") as f:
            return f.read(), full
    except OSError as e:
        raise KubeconfigError(f"{path}: field {name}: cannot read {full}: {e.strerror}") from None


def _named(path: str, doc: dict[str, Any], kind: str, name: str) -> dict[str, Any]:
    for entry in doc.get(f"{kind}s") or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            return entry.get(kind) or {}
    raise KubeconfigError(f"{path}: no {kind} named {name!r} (field {kind}s)")


def read_kubeconfig(path: str) -> Kubeconfig:
    """The current context's server, CA and client credentials; KubeconfigError says what is wrong."""
    doc = read_yaml(path, "kubeconfig", KubeconfigError)
    if not isinstance(doc, dict):
        raise KubeconfigError(f"{path}: not a kubeconfig (want a Config object)")
    context_name = doc.get("current-context")
    if not context_name:
        raise KubeconfigError(f"{path}: field current-context: not set")
    context = _named(path, doc, "context", context_name)
    cluster = _named(path, doc, "cluster", context.get("cluster", ""))
    user = _named(path, doc, "user", context.get("user", "")) if context.get("user") else {}
    server = cluster.get("server")
    if not server:
        raise KubeconfigError(f"{path}: field clusters[{context.get('cluster')}].server: not set")
    ca_pem, ca_file = _file_or_data(path, cluster, "certificate-authority")
    cert_pem, _ = _file_or_data(path, user, "client-certificate")
    key_pem, _ = _file_or_data(path, user, "client-key")
    return Kubeconfig(path=path, server=server, ca_pem=ca_pem, ca_file=ca_file,
                      insecure=bool(cluster.get("insecure-skip-tls-verify")), cert_pem=cert_pem, key_pem=key_pem,
                      token=user.get("token") or "")


def write_node_kubeconfig(path: str, bootstrap: Kubeconfig, client_pem_path: str) -> None:
    """The kubeconfig the kubelet writes after TLS bootstrap, atomically and readable by root only."""
    cluster: dict[str, Any] = {"server": bootstrap.server}
    if bootstrap.ca_file:
        cluster["certificate-authority"] = bootstrap.ca_file
    elif bootstrap.ca_pem:
        cluster["certificate-authority-data"] = base64.b64encode(bootstrap.ca_pem).decode()
    if bootstrap.insecure:
        cluster["insecure-skip-tls-verify"] = True
    doc = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "default-cluster", "cluster": cluster}],
        "users": [{"name": "default-auth",
                   "user": {"client-certificate": client_pem_path, "client-key": client_pem_path}}],
        "contexts": [{"name": "default-context",
                      "context": {"cluster": "default-cluster", "user": "default-auth", "namespace": "default"}}],
        "current-context": "default-context",
    }
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    durable.write_file(path, yaml.safe_dump(doc, sort_keys=False).encode(), 0o600)
