"""How the kubelet names a static pod: `<name>-<nodename>`, a UID hashed from content + node +
file, the `default` namespace, and the config.* annotations that mark it as a file pod."""

from __future__ import annotations

import copy
import hashlib
import json
from datetime import datetime, timezone
from typing import Any

from pykubelet.api.pod import CONFIG_SOURCE_ANNOTATION

CONFIG_HASH_ANNOTATION = "kubernetes.io/config.hash"
CONFIG_SEEN_ANNOTATION = "kubernetes.io/config.seen"
FILE_SOURCE = "file"


def static_pod_uid(manifest: dict[str, Any], node_name: str, source_path: str) -> str:
    """32 hex digits, stable for the same content on the same node from the same file.

    The kubelet hashes the decoded pod, then "host:<node>" and "file:<path>" with md5; we hash
    canonical JSON of the manifest the same way, so any content change gives a new UID (and so
    a replaced pod), as with the kubelet.
    """
    hasher = hashlib.md5(usedforsecurity=False)
    hasher.update(json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode())
    hasher.update(f"host:{node_name}".encode())
    hasher.update(f"file:{source_path}".encode())
    return hasher.hexdigest()


def apply_static_defaults(manifest: dict[str, Any], node_name: str, source_path: str) -> dict[str, Any]:
    """A copy of the manifest as the kubelet sees it: named for the node, with UID and annotations."""
    pod = copy.deepcopy(manifest)
    meta = pod.setdefault("metadata", {})
    if not isinstance(meta, dict):
        return pod  # metadata of the wrong type: left for validation to report
    uid = meta.get("uid") or static_pod_uid(manifest, node_name, source_path)
    meta["uid"] = uid
    if isinstance(meta.get("name"), str) and meta["name"]:
        meta["name"] = f"{meta['name']}-{node_name}"
    meta["namespace"] = meta.get("namespace") or "default"
    annotations = meta.get("annotations")
    if annotations is None or isinstance(annotations, dict):
        annotations = dict(annotations or {})
        annotations[CONFIG_HASH_ANNOTATION] = uid
        annotations[CONFIG_SOURCE_ANNOTATION] = FILE_SOURCE
        annotations[CONFIG_SEEN_ANNOTATION] = datetime.now(timezone.utc).isoformat()
        meta["annotations"] = annotations
    spec = pod.get("spec")
    if isinstance(spec, dict):
        spec["nodeName"] = node_name
    return pod
