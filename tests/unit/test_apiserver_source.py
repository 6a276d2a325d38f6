"""The apiserver pod source: a pod force-deleted (gone at once, grace 0) is handed over as
deleted first, so the node stops it within that grace period and not its spec's."""

from __future__ import annotations

import asyncio

from pykubelet.sources.apiserver import ApiserverPodSource


def raw_pod(name: str, uid: str, rv: str, **meta) -> dict:
    return {"metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": rv, **meta},
            "spec": {"terminationGracePeriodSeconds": 500, "containers": [{"name": "c", "image": "busybox:1.36"}]}}


class WatchingKube:
    def __init__(self, items, events):
        self.items, self.events = items, events

    async def get(self, path, **query):
        return {"items": self.items, "metadata": {"resourceVersion": "1"}}

    async def watch(self, path, query, timeout):
        for event in self.events:
            yield event
        await asyncio.sleep(3600)


async def test_a_force_deleted_pod_is_handed_over_deleted_before_it_goes():
    keep, gone = raw_pod("keep", "u1", "1"), raw_pod("gone", "u2", "1")
    final = raw_pod("gone", "u2", "2", deletionTimestamp="2026-01-01T00:00:00Z", deletionGracePeriodSeconds=0)
    sets = []
    source = ApiserverPodSource(WatchingKube([keep, gone], [{"type": "DELETED", "object": final}]), "n1",
                                lambda pods: sets.append({p.name: p for p in pods}))
    task = asyncio.create_task(source.run())
    try:
        while len(sets) < 3:
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
    listed, deleted, after = sets[:3]
    assert set(listed) == {"keep", "gone"} and not listed["gone"].deletion_timestamp
    assert deleted["gone"].deletion_timestamp and deleted["gone"].deletion_grace_period_seconds == 0
    assert set(after) == {"keep"}
