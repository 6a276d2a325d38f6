"""Where the apiserver keeps the pods this node writes (statuses, mirror pods, deletions)."""

from __future__ import annotations


def pods_path(namespace: str) -> str:
    """The namespace's pods collection (POST creates one there)."""
    return f"/api/v1/namespaces/{namespace}/pods"


def pod_path(namespace: str, name: str) -> str:
    """One pod; its status is the `/status` subresource under it."""
    return f"{pods_path(namespace)}/{name}"
