"""Mirror pods: the apiserver's read-only stand-ins for this node's static pods.

A mirror pod has the static pod's name, namespace and spec, the kubernetes.io/config.mirror
annotation holding the static pod's UID (its config hash), and the Node as owner (which the
NodeRestriction admission plugin requires). Deleted by a user, it is recreated; its static pod
removed, it is deleted.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Callable, Iterable

from pykubelet.api.pod import MIRROR_ANNOTATION, Pod
from pykubelet.kube import errors
from pykubelet.kube.paths import pod_path, pods_path
from pykubelet.util.log import get_logger

if TYPE_CHECKING:  # the client costs ~40 MB: imported only when joining a cluster
    from pykubelet.kube.client import KubeClient

log = get_logger(__name__)

Key = tuple[str, str]  # (namespace, name)


class MirrorPods:
    def __init__(self, kube: KubeClient, node_name: str, node_uid: Callable[[], str],
                 on_change: Callable[[str], None]):
        self.kube = kube
        self.node_name = node_name
        self.node_uid = node_uid
        self.on_change = on_change  # wakes the static pod (by UID) whose mirror changed
        self._mirrors: dict[Key, Pod] = {}
        self.known = False  # the apiserver's pods were listed at least once

    def mirror_of(self, pod: Pod) -> Pod | None:
        """The mirror pod of a static pod, if the apiserver holds one made for it."""
        mirror = self._mirrors.get((pod.namespace, pod.name))
        return mirror if mirror is not None and mirror.annotations.get(MIRROR_ANNOTATION) == pod.uid else None

    def update(self, mirrors: Iterable[Pod]) -> None:
        """The mirror pods the apiserver holds for this node (from the pod watch)."""
        new = {(m.namespace, m.name): m for m in mirrors}
        for key in new.keys() | self._mirrors.keys():
            before, after = self._mirrors.get(key), new.get(key)
            if before is None or after is None or before.uid != after.uid or \
                    before.deletion_timestamp != after.deletion_timestamp:
                for m in (before, after):
                    if m is not None:
                        self.on_change(m.annotations.get(MIRROR_ANNOTATION, ""))
        self._mirrors = new
        self.known = True

    def _mirror_of(self, pod: Pod) -> dict[str, Any]:
        raw = copy.deepcopy(pod.raw)
        meta = raw.setdefault("metadata", {})
        for key in ("uid", "resourceVersion", "creationTimestamp"):
            meta.pop(key, None)
        meta["annotations"] = {**pod.annotations, MIRROR_ANNOTATION: pod.uid}
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": self.node_name,
                                    "uid": self.node_uid(), "controller": True}]
        raw.pop("status", None)
        raw["spec"]["nodeName"] = self.node_name
        return raw

    async def ensure(self, pod: Pod) -> bool:
        """Make the apiserver's mirror match the static pod; True if one was (re)created."""
        if not self.node_uid():
            return False  # not registered yet: the owner reference needs the Node's UID
        current = self._mirrors.get((pod.namespace, pod.name))
        if current and current.annotations.get(MIRROR_ANNOTATION) == pod.uid and not current.deletion_timestamp:
            return False
        if current:
            log.info("Deleting outdated or deleted mirror pod", pod=pod.full_name, mirror=current.uid)
            await self._delete(pod, current.uid)
        try:
            created = await self.kube.create(pods_path(pod.namespace), self._mirror_of(pod))
        except errors.Conflict:
            return False  # one exists we have not seen yet: the watch will tell, and the next sync decides
        log.info("Created mirror pod", pod=pod.full_name, mirror=created["metadata"]["uid"])
        return True

    async def remove(self, pod: Pod) -> None:
        current = self._mirrors.get((pod.namespace, pod.name))
        if current and current.annotations.get(MIRROR_ANNOTATION) == pod.uid:
            await self._delete(pod, current.uid)

    async def _delete(self, pod: Pod, mirror_uid: str) -> None:
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                   "preconditions": {"uid": mirror_uid}}
        try:
            await self.kube.delete(pod_path(pod.namespace, pod.name), options)
        except (errors.NotFound, errors.Conflict):
            pass
