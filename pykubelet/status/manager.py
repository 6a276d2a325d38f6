"""The single source of truth for pod status on this node.

Workers hand in freshly computed statuses; the manager keeps condition transition times
stable across syncs and (with an apiserver, in its own issue) writes changes out.
"""

from __future__ import annotations

import copy
from typing import Any

from pykubelet.api.pod import Pod


class StatusManager:
    def __init__(self) -> None:
        self._pods: dict[str, Pod] = {}
        self._statuses: dict[str, dict[str, Any]] = {}

    def set(self, pod: Pod, status: dict[str, Any]) -> None:
        old = self._statuses.get(pod.uid)
        if old:
            old_conditions = {c["type"]: c for c in old.get("conditions", [])}
            for cond in status.get("conditions", []):
                before = old_conditions.get(cond["type"])
                if before and before["status"] == cond["status"]:
                    cond["lastTransitionTime"] = before["lastTransitionTime"]
        self._pods[pod.uid] = pod
        self._statuses[pod.uid] = status

    def get(self, uid: str) -> dict[str, Any] | None:
        return self._statuses.get(uid)

    def remove(self, uid: str) -> None:
        self._pods.pop(uid, None)
        self._statuses.pop(uid, None)

    def pod_list(self) -> dict[str, Any]:
        """Every pod with its status, as a v1 PodList (what /pods serves)."""
        items = []
        for uid, pod in self._pods.items():
            obj = copy.deepcopy(pod.raw)
            obj.setdefault("apiVersion", "v1")
            obj.setdefault("kind", "Pod")
            obj["status"] = self._statuses[uid]
            items.append(obj)
        return {"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": items}
