"""A local copy of a set of API objects: list, then watch from that resourceVersion.

Bookmarks keep the resourceVersion fresh; 410 Gone (too old) means list again; a broken
connection is retried with back-off. Every change hands the whole set to `on_change`, as
client-go's reflector feeds an informer's store.
"""

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING, Any, Callable

from pykubelet.kube import errors
from pykubelet.util.log import get_logger

if TYPE_CHECKING:  # the client costs ~40 MB: imported only when joining a cluster
    from pykubelet.kube.client import KubeClient

log = get_logger(__name__)

RETRY_MIN, RETRY_MAX = 0.1, 30.0  # short first: a 403 just after a pod is bound clears within moments

Objects = dict[str, dict[str, Any]]  # uid -> raw object


def _key(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return meta.get("uid") or f"{meta.get('namespace', '')}/{meta.get('name', '')}"


class Reflector:
    def __init__(self, kube: KubeClient, path: str, query: dict[str, Any], on_change: Callable[[Objects], None],
                 what: str, done: Callable[[], bool] = lambda: False, forbidden_is_transient: bool = False,
                 on_deleted: Callable[[dict[str, Any]], None] | None = None):
        self.kube = kube
        self.path = path
        self.query = query
        self.on_change = on_change
        self.what = what  # for logs: "pod", "node", "configmaps/ns/name"
        self.done = done  # checked after every change: run() returns once it is true
        # A node is refused a pod's objects until the Node authorizer has seen the pod bound.
        self.forbidden_is_transient = forbidden_is_transient
        self.on_deleted = on_deleted  # given a deleted object as it was last, before the set without it
        self.ready = asyncio.Event()  # set after the first list was handed over
        self.objects: Objects = {}
        self._version = ""  # resourceVersion to watch from; "" means list first

    def _publish(self) -> None:
        self.on_change(self.objects)
        self.ready.set()

    async def _list(self) -> str:
        answer = await self.kube.get(self.path, **self.query)
        self.objects = {_key(o): o for o in answer.get("items") or []}
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
            if kind == "DELETED":
                if self.on_deleted is not None:
                    self.on_deleted(obj)
                self.objects.pop(_key(obj), None)
            else:
                self.objects[_key(obj)] = obj
            self._publish()
            if self.done():
                return

    async def run(self) -> None:
        delay = RETRY_MIN
        while not self.done():
            try:
                if not self._version:
                    self._version = await self._list()
                    delay = RETRY_MIN
                    continue  # done() may hold already
                await self._watch()
                delay = RETRY_MIN
                continue
            except errors.Gone:
                log.info("Watch expired; listing again", what=self.what)
                self._version = ""
                continue
            except errors.KubeError as e:
                quiet = self.forbidden_is_transient and e.status == 403
                (log.debug if quiet else log.warning)("Watch failed; retrying", what=self.what, err=str(e),
                                                      retryIn=delay)
            except (ValueError, KeyError, TypeError) as e:  # a malformed answer: say so, keep watching
                log.error("Unexpected answer while watching; retrying", what=self.what, err=repr(e), retryIn=delay)
                self._version = ""
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX)
