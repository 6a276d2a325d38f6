"""Pods bound to this node, from the apiserver: list, then watch from that resourceVersion.

Bookmarks keep the resourceVersion fresh; 410 Gone (too old) means list again; a broken
connection is retried with back-off. Each change publishes the whole set of this node's pods.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any, Callable

from pykubelet.api.errors import InvalidObject
from pykubelet.api.pod import Pod, parse_pod
from pykubelet.kube import errors
from pykubelet.kube.client import KubeClient
from pykubelet.util.log import get_logger

log = get_logger(__name__)

RETRY_MIN, RETRY_MAX = 0.5, 30.0


class ApiserverPodSource:
    def __init__(self, kube: KubeClient, node_name: str, on_pods: Callable[[list[Pod]], None]):
        self.kube = kube
        self.node_name = node_name
        self.on_pods = on_pods
        self.ready = asyncio.Event()
        self._pods: dict[str, Pod] = {}
        self._invalid: set[str] = set()  # UIDs whose error was already logged
        self._version = ""  # resourceVersion to watch from; "" means list first

    @property
    def _query(self) -> dict[str, Any]:
        return {"fieldSelector": f"spec.nodeName={self.node_name}"}

    def _parse(self, raw: dict[str, Any]) -> Pod | None:
        meta = raw.get("metadata", {})
        try:
            return parse_pod(raw, where=f"apiserver pod {meta.get('namespace')}/{meta.get('name')}")
        except InvalidObject as e:
            if meta.get("uid") not in self._invalid:
                self._invalid.add(meta.get("uid", ""))
                log.error("Ignoring a pod this agent cannot run", err=str(e))
            return None

    def _publish(self) -> None:
        self.on_pods(list(self._pods.values()))
        self.ready.set()

    async def _list(self) -> str:
        answer = await self.kube.get("/api/v1/pods", **self._query)
        self._pods = {p.uid: p for p in map(self._parse, answer.get("items", [])) if p}
        self._publish()
        return answer["metadata"]["resourceVersion"]

    async def _watch(self) -> None:
        # A random timeout spreads the reconnects of many nodes, as client-go's reflector does.
        timeout = random.randint(300, 600)
        query = {**self._query, "resourceVersion": self._version}
        async for event in self.kube.watch("/api/v1/pods", query, timeout):
            kind, obj = event.get("type"), event.get("object", {})
            if kind == "ERROR":
                if obj.get("code") == 410:
                    raise errors.Gone("WATCH", "/api/v1/pods", 410, obj.get("reason", "Expired"), obj.get("message", ""))
                raise errors.KubeError("WATCH", "/api/v1/pods", obj.get("code", 0), obj.get("reason", ""),
                                       obj.get("message", ""))
            self._version = obj.get("metadata", {}).get("resourceVersion", self._version)
            if kind == "BOOKMARK":
                continue
            uid = obj.get("metadata", {}).get("uid", "")
            if kind == "DELETED":
                self._pods.pop(uid, None)
            else:
                pod = self._parse(obj)
                if pod is None:
                    continue
                self._pods[uid] = pod
            self._publish()

    async def run(self) -> None:
        delay = RETRY_MIN
        while True:
            try:
                if not self._version:
                    self._version = await self._list()
                await self._watch()
                delay = RETRY_MIN
            except errors.Gone:
                log.info("Pod watch expired; listing again")
                self._version = ""
            except errors.KubeError as e:
                log.warning("Pod watch failed; retrying", err=str(e), retryIn=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX)
