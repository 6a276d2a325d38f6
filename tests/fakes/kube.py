"""An in-memory apiserver client with KubeClient's calls the core makes (create, get, patch,
delete), recording every write so tests can count them."""

from __future__ import annotations

import copy
import itertools
from typing import Any

from pykubelet.kube import errors


class FakeKube:
    host = "fake"

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.writes: list[tuple[str, str, Any]] = []  # (verb, path, body)
        self._uids = itertools.count(1)

    def patches(self, suffix: str = "/status") -> list[Any]:
        return [body for verb, path, body in self.writes if verb == "patch" and path.endswith(suffix)]

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.writes.append(("create", path, copy.deepcopy(body)))
        obj = copy.deepcopy(body)
        obj.setdefault("metadata", {})["uid"] = obj["metadata"].get("uid") or f"api-uid-{next(self._uids)}"
        key = f"{path}/{obj['metadata'].get('name', '')}"
        if key in self.objects:
            raise errors.Conflict("POST", path, 409, "AlreadyExists", "already exists")
        self.objects[key] = obj
        return copy.deepcopy(obj)

    async def get(self, path: str) -> dict[str, Any]:
        if path not in self.objects:
            raise errors.NotFound("", path, 404, "NotFound", "not found")
        return copy.deepcopy(self.objects[path])

    async def patch(self, path: str, body: dict[str, Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        self.writes.append(("patch", path, copy.deepcopy(body)))
        target = path.removesuffix("/status")
        if target not in self.objects:
            raise errors.NotFound("", path, 404, "NotFound", "not found")
        if "status" in body:
            self.objects[target]["status"] = copy.deepcopy(body["status"])
        return copy.deepcopy(self.objects[target])

    async def replace(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.writes.append(("replace", path, copy.deepcopy(body)))
        if path not in self.objects:
            raise errors.NotFound("", path, 404, "NotFound", "not found")
        self.objects[path] = copy.deepcopy(body)
        return copy.deepcopy(body)

    async def delete(self, path: str, body: dict[str, Any] | None = None) -> None:
        self.writes.append(("delete", path, copy.deepcopy(body)))
        if self.objects.pop(path, None) is None:
            raise errors.NotFound("", path, 404, "NotFound", "not found")
