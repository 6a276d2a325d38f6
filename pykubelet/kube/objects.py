"""ConfigMaps, Secrets and Services the node's pods read, kept fresh by watches.

ConfigMaps and Secrets follow the kubelet's default changeDetectionStrategy, Watch: one watch
per referenced object (`fieldSelector=metadata.name=<name>`, all the Node authorizer lets a
node do), started when the first pod refers to it and stopped when the last one goes. A change
wakes the pods that refer to the object, so a mounted file follows its object within seconds.
Services are one list+watch over all namespaces (service link variables).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable

from pykubelet.kube.reflector import Objects, Reflector
from pykubelet.util.log import get_logger
from pykubelet.util.timeouts import within

if TYPE_CHECKING:  # the client costs ~40 MB: imported only when joining a cluster
    from pykubelet.kube.client import KubeClient

log = get_logger(__name__)

SYNC_TIMEOUT = 10.0
# resource (plural, the API path) -> the singular the kubelet's errors use: configmap "x" not found
SINGULAR = {"configmaps": "configmap", "secrets": "secret"}


class ObjectNotFound(Exception):
    """The object does not exist; the message is the kubelet's: `configmap "x" not found`."""


class NotSynced(Exception):
    """The object's watch has not delivered it yet (unreachable apiserver, not yet authorized)."""


def _report_death(task: asyncio.Task[None]) -> None:
    """A watch ends only by cancellation; anything else is a bug to say out loud."""
    if not task.cancelled() and task.exception() is not None:
        log.error("Object watch died; its pods will report the object as not synced", task=task.get_name(),
                  exc_info=task.exception())


@dataclass
class _Watched:
    task: asyncio.Task[None] | None = None
    synced: asyncio.Event = field(default_factory=asyncio.Event)
    obj: dict[str, Any] | None = None
    users: set[str] = field(default_factory=set)  # pod UIDs


class ObjectCache:
    """Namespaced ConfigMaps and Secrets by (resource, namespace, name), each with its watch."""

    def __init__(self, kube: KubeClient, on_change: Callable[[str], None]):
        self.kube = kube
        self.on_change = on_change  # called with each UID of a pod that refers to a changed object
        self._items: dict[tuple[str, str, str], _Watched] = {}
        self._by_pod: dict[str, set[tuple[str, str, str]]] = {}

    def register(self, uid: str, namespace: str, names: dict[str, set[str]]) -> None:
        """The objects pod `uid` refers to now (resource -> names); watches follow."""
        keys = {(resource, namespace, name) for resource, group in names.items() for name in group}
        old = self._by_pod.get(uid, set())
        for key in keys - old:
            item = self._items.get(key)
            if item is None:
                item = self._items[key] = _Watched()
                item.task = asyncio.create_task(self._watch(key, item), name=f"watch-{key[0]}-{key[1]}-{key[2]}")
                item.task.add_done_callback(_report_death)
            item.users.add(uid)
        self._by_pod[uid] = keys
        self._release(uid, old - keys)

    def unregister(self, uid: str) -> None:
        self._release(uid, self._by_pod.pop(uid, set()))

    def _release(self, uid: str, keys: Iterable[tuple[str, str, str]]) -> None:
        for key in keys:
            item = self._items.get(key)
            if item is None:
                continue
            item.users.discard(uid)
            if not item.users:
                if item.task:
                    item.task.cancel()
                del self._items[key]

    async def close(self) -> None:
        tasks = [i.task for i in self._items.values() if i.task]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._items.clear()

    async def get(self, resource: str, namespace: str, name: str, timeout: float = SYNC_TIMEOUT) -> dict[str, Any]:
        """The object (for a registered pod); ObjectNotFound, or NotSynced after `timeout`."""
        item = self._items.get((resource, namespace, name))
        if item is None:
            raise NotSynced(f"{SINGULAR[resource]} {namespace}/{name} is not referenced by a registered pod")
        try:
            await within(item.synced.wait(), timeout)
        except asyncio.TimeoutError:
            raise NotSynced(f"failed to sync {SINGULAR[resource]} cache: timed out waiting for the condition") from None
        if item.obj is None:
            raise ObjectNotFound(f'{SINGULAR[resource]} "{name}" not found')
        return item.obj

    async def _watch(self, key: tuple[str, str, str], item: _Watched) -> None:
        resource, namespace, name = key

        def changed(obj: dict[str, Any] | None) -> None:
            old = (item.obj or {}).get("metadata", {}).get("resourceVersion")
            new = (obj or {}).get("metadata", {}).get("resourceVersion")
            first = not item.synced.is_set()
            item.obj = obj
            item.synced.set()
            if not first and old != new:
                for uid in list(item.users):
                    self.on_change(uid)

        await Reflector(self.kube, f"/api/v1/namespaces/{namespace}/{resource}",
                        {"fieldSelector": f"metadata.name={name}"},
                        lambda objects: changed(next(iter(objects.values()), None)), f"{resource}/{namespace}/{name}",
                        # As the kubelet: an immutable object cannot change, so stop watching it.
                        done=lambda: bool((item.obj or {}).get("immutable")), forbidden_is_transient=True).run()


class ServiceCache:
    """Every Service of the cluster (the kubelet's service informer), for service link variables."""

    def __init__(self, kube: KubeClient):
        self.kube = kube
        self.synced = asyncio.Event()
        self._services: dict[str, dict[str, Any]] = {}

    def services(self) -> list[dict[str, Any]]:
        return list(self._services.values())

    async def wait_synced(self, timeout: float = SYNC_TIMEOUT) -> None:
        try:
            await within(self.synced.wait(), timeout)
        except asyncio.TimeoutError:
            raise NotSynced("services have not yet been read at least once, cannot construct envvars") from None

    def _on_change(self, services: Objects) -> None:
        self._services = dict(services)
        self.synced.set()

    async def run(self) -> None:
        await Reflector(self.kube, "/api/v1/services", {}, self._on_change, "services").run()
