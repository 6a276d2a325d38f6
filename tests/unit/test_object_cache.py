"""The watched-object cache's bookkeeping: one watch per referenced object, shared by the pods
that refer to it, stopped with the last of them; changes wake exactly those pods."""

from __future__ import annotations

import asyncio

import pytest

from pykubelet.kube.objects import NotSynced, ObjectCache, ObjectNotFound


class FakeApi:
    """Lists and watches ConfigMaps like the apiserver, from a dict the test changes."""

    def __init__(self):
        self.objects: dict[str, dict] = {}
        self.watchers: list[tuple[str, asyncio.Queue]] = []
        self.version = 1

    async def get(self, path, **query):
        name = query["fieldSelector"].split("=", 1)[1]
        items = [self.objects[name]] if name in self.objects else []
        return {"metadata": {"resourceVersion": str(self.version)}, "items": items}

    async def watch(self, path, query, timeout):
        queue: asyncio.Queue = asyncio.Queue()
        name = query["fieldSelector"].split("=", 1)[1]
        self.watchers.append((name, queue))
        try:
            while True:
                yield await queue.get()
        finally:
            self.watchers.remove((name, queue))

    def put(self, name, data):
        self.version += 1
        kind = "MODIFIED" if name in self.objects else "ADDED"
        self.objects[name] = {"metadata": {"name": name, "resourceVersion": str(self.version)}, "data": data}
        for watched, queue in self.watchers:
            if watched == name:
                queue.put_nowait({"type": kind, "object": self.objects[name]})


async def settle():
    for _ in range(5):
        await asyncio.sleep(0)


async def test_one_watch_per_object_shared_and_stopped_with_the_last_pod():
    api = FakeApi()
    woken: list[str] = []
    cache = ObjectCache(api, woken.append)  # type: ignore[arg-type]
    api.put("cfg", {"a": "1"})
    cache.register("pod-1", "ns", {"configmaps": {"cfg"}})
    cache.register("pod-2", "ns", {"configmaps": {"cfg"}, "secrets": set()})
    assert (await cache.get("configmaps", "ns", "cfg"))["data"] == {"a": "1"}
    await settle()
    assert len(api.watchers) == 1

    api.put("cfg", {"a": "2"})
    await settle()
    assert sorted(woken) == ["pod-1", "pod-2"]
    assert (await cache.get("configmaps", "ns", "cfg"))["data"] == {"a": "2"}

    cache.unregister("pod-1")
    await settle()
    assert len(api.watchers) == 1
    cache.unregister("pod-2")
    await settle()
    assert api.watchers == []
    with pytest.raises(NotSynced):
        await cache.get("configmaps", "ns", "cfg")


async def test_a_missing_object_reads_as_the_kubelets_not_found_until_it_is_created():
    api = FakeApi()
    woken: list[str] = []
    cache = ObjectCache(api, woken.append)  # type: ignore[arg-type]
    cache.register("pod-1", "ns", {"secrets": {"late"}})
    with pytest.raises(ObjectNotFound) as caught:
        await cache.get("secrets", "ns", "late")
    assert str(caught.value) == 'secret "late" not found'
    await settle()
    api.put("late", {"k": "dg=="})
    await settle()
    assert woken == ["pod-1"]
    assert (await cache.get("secrets", "ns", "late"))["data"] == {"k": "dg=="}
    await cache.close()


async def test_an_immutable_object_is_not_watched_once_read():
    api = FakeApi()
    api.put("fixed", {"a": "1"})
    api.objects["fixed"]["immutable"] = True
    cache = ObjectCache(api, lambda uid: None)  # type: ignore[arg-type]
    cache.register("pod-1", "ns", {"configmaps": {"fixed"}})
    assert (await cache.get("configmaps", "ns", "fixed"))["data"] == {"a": "1"}
    await settle()
    assert api.watchers == []
    assert (await cache.get("configmaps", "ns", "fixed"))["data"] == {"a": "1"}
    cache.unregister("pod-1")
