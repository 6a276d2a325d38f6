"""Pods bound to this node, from the apiserver (a reflector on spec.nodeName=<node>).

Each change publishes the whole set of this node's pods; a pod that cannot be parsed is
logged once and left out, so one bad object never stops the others.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from pykubelet.api.errors import InvalidObject
from pykubelet.api.pod import Pod, parse_pod
from pykubelet.kube.reflector import Objects, Reflector
from pykubelet.util.log import get_logger

if TYPE_CHECKING:  # the client costs ~40 MB: imported only when joining a cluster
    from pykubelet.kube.client import KubeClient

log = get_logger(__name__)


class ApiserverPodSource:
    def __init__(self, kube: KubeClient, node_name: str, on_pods: Callable[[list[Pod]], None]):
        self.on_pods = on_pods
        self._invalid: set[str] = set()  # UIDs whose error was already logged
        self._parsed: dict[str, tuple[str, Pod | None]] = {}  # uid -> (resourceVersion, pod): parse each change once
        self._reflector = Reflector(kube, "/api/v1/pods", {"fieldSelector": f"spec.nodeName={node_name}"},
                                    self._publish, "pod", on_deleted=self._deleted)
        self.ready = self._reflector.ready

    def _parse(self, raw: dict[str, Any]) -> Pod | None:
        meta = raw.get("metadata", {})
        try:
            return parse_pod(raw, where=f"apiserver pod {meta.get('namespace')}/{meta.get('name')}")
        except InvalidObject as e:
            if meta.get("uid") not in self._invalid:
                self._invalid.add(meta.get("uid", ""))
                log.error("Ignoring a pod this agent cannot run", err=str(e))
            return None

    def _pod(self, uid: str, raw: dict[str, Any]) -> Pod | None:
        version = raw.get("metadata", {}).get("resourceVersion", "")
        cached = self._parsed.get(uid)
        if cached is None or cached[0] != version:
            cached = self._parsed[uid] = (version, self._parse(raw))
        return cached[1]

    def _publish(self, objects: Objects) -> None:
        for uid in self._parsed.keys() - objects.keys():
            del self._parsed[uid]
        self.on_pods([p for uid, raw in objects.items() if (p := self._pod(uid, raw))])

    def _deleted(self, raw: dict[str, Any]) -> None:
        """A pod gone from the apiserver at once (a force deletion, grace 0) was never seen being
        deleted: hand over its last state first, so it is stopped within its deletion grace
        period (as the kubelet does) rather than its spec's; the set without it follows."""
        meta = raw.get("metadata") or {}
        if not meta.get("deletionTimestamp") or not meta.get("uid"):
            return
        objects = {**self._reflector.objects, meta["uid"]: raw}
        self.on_pods([p for uid, obj in objects.items() if (p := self._pod(uid, obj))])

    async def run(self) -> None:
        await self._reflector.run()
