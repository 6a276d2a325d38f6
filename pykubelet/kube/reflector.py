"""A local copy of a set of API objects: list, then watch from that resourceVersion.

Bookmarks keep the resourceVersion fresh; 410 Gone (too old) means list again; a broken
connection is retried with back-off. Every change hands the whole set to `on_change`, as
client-go's reflector feeds an informer's store.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any, Callable

from pykubelet.kube import errors
from pykubelet.kube.client import KubeClient
from pykubelet.util.log import get_logger

log = get_logger(__name__)

RETRY_MIN, RETRY_MAX = 0.5, 30.0

Objects = dict[str, dict[str, Any]]  # uid -> raw object


class Reflector:
    def __init__(self, kube: KubeClient, path: str, query: dict[str, Any], on_change: Callable[[Objects], None],
                 what: str):
        self.kube = kube
        self.path = path
        self.query = query
        self.on_change = on_change
        self.what = what  # for logs: "pod", "node"
        self.ready = asyncio.Event()  # set after the first list was handed over
        self.objects: Objects = {}
        self._version = ""  # resourceVersion to watch from; "" means list first

    def _publish(self) -> None:
        self.on_change(self.objects)
        self.ready.set()

    async def _list(self) -> str:
        answer = await self.kube.get(self.path, **self.query)
        self.objects = {o["metadata"]["uid"]: o for o in answer.get("items", [])}
        self._publish()
        return answer["metadata"]["resourceVersion"]

    async def _watch(self) -> None:
        # A random timeout spreads the reconnects of many nodes, as client-go's reflector does.
        timeout = random.randint(300, 600)
        query = {**self.query, "resourceVersion": self._version}
        async for event in self.kube.watch(self.path, query, timeout):
            kind, obj = event.get("type"), event.get("object", {})
            if kind == "ERROR":
                if obj.get("code") == 410:
                    raise errors.Gone("WATCH", self.path, 410, obj.get("reason", "Expired"), obj.get("message", ""))
                raise errors.KubeError("WATCH", self.path, obj.get("code", 0), obj.get("reason", ""),
                                       obj.get("message", ""))
            self._version = obj.get("metadata", {}).get("resourceVersion", self._version)
            if kind == "BOOKMARK":
                continue
            uid = obj.get("metadata", {}).get("uid", "")
            if kind == "DELETED":
                self.objects.pop(uid, None)
            else:
                self.objects[uid] = obj
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
                log.info("Watch expired; listing again", what=self.what)
                self._version = ""
            except errors.KubeError as e:
                log.warning("Watch failed; retrying", what=self.what, err=str(e), retryIn=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX)
