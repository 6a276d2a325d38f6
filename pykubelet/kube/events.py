"""Events, so `kubectl describe` tells the story: best-effort, queued, repeated ones counted.

Recording never blocks a caller and never fails it: a full queue or an unreachable apiserver
costs events, not pods.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from typing import TYPE_CHECKING, Any

from pykubelet.api.times import now_rfc3339
from pykubelet.kube import errors
from pykubelet.util.log import get_logger

if TYPE_CHECKING:  # the client costs ~40 MB: imported only when joining a cluster
    from pykubelet.kube.client import KubeClient

log = get_logger(__name__)

NORMAL, WARNING = "Normal", "Warning"
QUEUE_SIZE = 1000
REPEAT_WINDOW_SECONDS = 600  # a repeat within this window bumps the count of the same Event


def pod_ref(namespace: str, name: str, uid: str, container: str | None = None) -> dict[str, str]:
    ref = {"kind": "Pod", "apiVersion": "v1", "namespace": namespace, "name": name, "uid": uid}
    if container:
        ref["fieldPath"] = f"spec.containers{{{container}}}"
    return ref


def node_ref(node_name: str) -> dict[str, str]:
    # The kubelet names its node in events with the node name as UID, in namespace default.
    return {"kind": "Node", "name": node_name, "uid": node_name, "namespace": ""}


class EventRecorder:
    def __init__(self, kube: KubeClient | None, node_name: str):
        self.kube = kube
        self.node_name = node_name
        self._queue: asyncio.Queue[tuple[dict[str, str], str, str, str]] = asyncio.Queue(QUEUE_SIZE)
        self._seen: dict[tuple[str, ...], tuple[str, str, int, float]] = {}  # key -> (ns, name, count, when)

    def record(self, ref: dict[str, str], kind: str, reason: str, message: str) -> None:
        log.debug("Event", object=f"{ref.get('namespace', '')}/{ref['name']}", type=kind, reason=reason,
                  message=message)
        if self.kube is None:
            return
        try:
            self._queue.put_nowait((ref, kind, reason, message))
        except asyncio.QueueFull:
            log.warning("Event queue full; event dropped", reason=reason, object=ref["name"])

    async def run(self) -> None:
        while True:
            ref, kind, reason, message = await self._queue.get()
            try:
                await self._send(ref, kind, reason, message)
            except errors.KubeError as e:
                log.warning("Could not write event", reason=reason, object=ref["name"], err=str(e))

    async def _send(self, ref: dict[str, str], kind: str, reason: str, message: str) -> None:
        assert self.kube is not None
        namespace = ref.get("namespace") or "default"
        key = (ref.get("uid", ""), ref.get("fieldPath", ""), kind, reason, message)
        stamp = now_rfc3339()
        seen = self._seen.get(key)
        if seen and time.time() - seen[3] < REPEAT_WINDOW_SECONDS:
            ns, name, count, _ = seen
            try:
                await self.kube.patch(f"/api/v1/namespaces/{ns}/events/{name}",
                                      {"count": count + 1, "lastTimestamp": stamp})
                self._seen[key] = (ns, name, count + 1, time.time())
                return
            except errors.NotFound:
                pass  # expired on the server: write a new one
        name = f"{ref['name']}.{secrets.token_hex(8)}"
        event: dict[str, Any] = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": ref, "reason": reason, "message": message, "type": kind,
            "source": {"component": "kubelet", "host": self.node_name},
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
            "reportingComponent": "kubelet", "reportingInstance": self.node_name,
        }
        await self.kube.create(f"/api/v1/namespaces/{namespace}/events", event)
        self._seen[key] = (namespace, name, 1, time.time())
        if len(self._seen) > 4 * QUEUE_SIZE:
            self._seen = {k: v for k, v in self._seen.items() if time.time() - v[3] < REPEAT_WINDOW_SECONDS}
