"""The single source of truth for pod status on this node, and its only writer to the apiserver.

Workers hand in freshly computed statuses. The manager keeps what must not change across
updates, or across an agent restart (status/merge.py: startTime, transition times), and (with
an apiserver) patches a pod's status only when it changed; a static pod's status goes to its
mirror pod, and only once the mirror pods are known (so a restarted agent starts from the
mirror's status, not from nothing). It also finishes graceful deletion: once a deleted pod's
containers are stopped, the final DELETE (grace 0, UID precondition), as the kubelet does.

Others write pod status too: the node lifecycle controller sets every pod's Ready to False while
its node is not Ready (as on a kubeadm control plane before the node's podCIDR arrives). Like the
kubelet's status manager, this one compares the apiserver's status with what it sent every
RESYNC_SECONDS and writes its own again where a phase or a condition it owns differs.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Protocol

from pykubelet.api.pod import Pod
from pykubelet.api.pod_status import PodStatus, pod_list
from pykubelet.kube import errors
from pykubelet.kube.paths import pod_path
from pykubelet.status.merge import Status, carry_over
from pykubelet.util.log import get_logger
from pykubelet.util.timeouts import within

if TYPE_CHECKING:  # the client costs ~40 MB: imported only when joining a cluster
    from pykubelet.kube.client import KubeClient

log = get_logger(__name__)

RESYNC_SECONDS = 10.0  # failed writes are retried at least this often


class Mirrors(Protocol):
    """The apiserver's mirror pods of this node's static pods (pods/mirror.py)."""

    known: bool
    """Whether the apiserver's pods were listed at least once."""

    def mirror_of(self, pod: Pod) -> Pod | None: ...


def _api_status(pod: Pod | None) -> dict[str, Any] | None:
    status = pod.raw.get("status") if pod is not None else None
    return status if isinstance(status, dict) and status else None


def _version(obj: dict[str, Any] | None) -> int:
    """The object's resourceVersion as a number (etcd's revision); 0 when it has none or another kind."""
    version = ((obj or {}).get("metadata") or {}).get("resourceVersion", "")
    return int(version) if isinstance(version, str) and version.isdigit() else 0


def _overwritten(api: dict[str, Any] | None, sent: dict[str, Any]) -> bool:
    """Someone else changed the phase or a condition this node wrote."""
    if api is None:
        return False
    if api.get("phase") != sent.get("phase"):
        return True
    theirs = {c.get("type"): c.get("status") for c in api.get("conditions") or [] if isinstance(c, dict)}
    return any(theirs.get(c["type"]) != c["status"] for c in sent.get("conditions") or [])


class StatusManager:
    def __init__(self, kube: KubeClient | None = None, mirrors: Mirrors | None = None) -> None:
        self.kube = kube
        self.mirrors = mirrors
        self._unbased: set[str] = set()  # static pods whose mirror was not known at their first status
        self._pods: dict[str, Pod] = {}
        self._statuses: dict[str, Status] = {}  # uid -> the status as sent (v1 JSON), merged
        self._sent: dict[str, Status] = {}  # uid -> what the apiserver has from us
        self._sent_version: dict[str, int] = {}  # uid -> the resourceVersion our last write made
        self._dirty: set[str] = set()
        self._deletions: dict[str, Pod] = {}
        self._wake = asyncio.Event()
        self._next_reconcile = 0.0

    def _in_api(self, pod: Pod) -> tuple[dict[str, Any] | None, int]:
        """The pod's status as the apiserver last showed it (a static pod's: its mirror's), and its version."""
        shown = pod
        if pod.is_static:
            shown = self.mirrors.mirror_of(pod) if self.mirrors is not None else None
        return _api_status(shown), _version(shown.raw if shown is not None else None)

    def reconcile(self) -> None:
        """Mark for writing the pods whose status someone else overwrote after our last write."""
        for uid, sent in self._sent.items():
            pod = self._pods.get(uid)
            if pod is None or uid in self._dirty:
                continue
            api, version = self._in_api(pod)
            if version and version <= self._sent_version.get(uid, 0):
                continue  # that view is not newer than our own write: its echo is not in yet
            if _overwritten(api, sent):
                log.info("Pod status changed by someone else; writing ours again", pod=pod.full_name)
                self._dirty.add(uid)

    def _recovered(self, pod: Pod) -> dict[str, Any] | None:
        """The status the apiserver holds: the mirror pod's for a static pod, else the pod's own."""
        if pod.is_static:
            if self.kube is None or self.mirrors is None:
                return None
            if not self.mirrors.known:
                self._unbased.add(pod.uid)  # look again when the mirror pods are listed
                return None
            self._unbased.discard(pod.uid)
            return _api_status(self.mirrors.mirror_of(pod))
        return _api_status(pod)

    def set(self, pod: Pod, computed: PodStatus) -> None:
        old = self._statuses.get(pod.uid)
        if old is None or pod.uid in self._unbased:
            old = self._recovered(pod) or old
        # Serialized here, where it leaves the pure status code: it is kept, sent and served as
        # the v1 JSON, and merged in that shape (status/merge.py says why).
        status = carry_over(old, computed.to_dict())
        self._pods[pod.uid] = pod
        self._statuses[pod.uid] = status
        if self.kube is not None and self._sent.get(pod.uid) != status:
            self._dirty.add(pod.uid)
            self._wake.set()

    def observe(self, pod: Pod) -> None:
        """The source's newer copy of a pod whose worker had nothing to do for it: the status the
        apiserver holds, which reconcile() compares with what this node sent."""
        if pod.uid in self._pods:
            self._pods[pod.uid] = pod

    def get(self, uid: str) -> Status | None:
        """The pod's status as this node reports it (v1 JSON)."""
        return self._statuses.get(uid)

    def reported(self, uid: str) -> bool:
        """The apiserver has the pod's final status (Failed or Succeeded) from us, or there is no
        apiserver, or the pod is forgotten: what a node shutting down waits for."""
        status = self._statuses.get(uid)
        if self.kube is None or status is None:
            return True
        return uid not in self._dirty and status.get("phase") in ("Failed", "Succeeded")

    def retry_now(self) -> None:
        """Retry failed writes now rather than at the next resync."""
        if self._dirty:
            self._wake.set()

    def pods(self) -> list[tuple[Pod, Status]]:
        """Every pod with its current status (the kubelet API's view of the node)."""
        return [(pod, self._statuses[uid]) for uid, pod in self._pods.items()]

    def resend(self, uid: str) -> None:
        """Write the status again (the mirror pod it goes to was recreated)."""
        self._sent.pop(uid, None)
        if uid in self._statuses:
            self._dirty.add(uid)
            self._wake.set()

    def remove(self, uid: str) -> None:
        self._unbased.discard(uid)
        self._pods.pop(uid, None)
        self._statuses.pop(uid, None)
        self._sent.pop(uid, None)
        self._sent_version.pop(uid, None)
        self._dirty.discard(uid)

    def finish_deletion(self, pod: Pod) -> None:
        """The pod's containers are gone: write its last status (how they ended), then delete it
        from the apiserver for good; its status is forgotten once the DELETE went through."""
        if self.kube is not None and not pod.is_static:
            self._deletions[pod.uid] = pod
            self._wake.set()
        else:
            self.remove(pod.uid)

    def pod_list(self) -> dict[str, Any]:
        """Every pod with its status, as a v1 PodList (what /pods serves)."""
        return pod_list(self.pods())

    async def run(self) -> None:
        """Write dirty statuses and pending deletions; retry failures every RESYNC_SECONDS."""
        while True:
            try:
                await within(self._wake.wait(), RESYNC_SECONDS)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()
            # Every RESYNC_SECONDS, not on every wake: the echo of our own latest write may not be in yet.
            now = asyncio.get_running_loop().time()
            if now >= self._next_reconcile:
                self._next_reconcile = now + RESYNC_SECONDS
                self.reconcile()
            for uid in list(self._dirty):
                await self._write_status(uid)
            for uid, pod in list(self._deletions.items()):
                if uid not in self._dirty:  # its last status first (retried until written)
                    await self._delete(pod)

    async def _write_status(self, uid: str) -> None:
        assert self.kube is not None
        pod, status = self._pods.get(uid), self._statuses.get(uid)
        if pod is None or status is None:
            self._dirty.discard(uid)
            return
        if uid in self._unbased:
            if self.mirrors is None or not self.mirrors.known:
                return  # a static pod before the mirror pods are listed: written once they are
            self._unbased.discard(uid)
            status = self._statuses[uid] = carry_over(_api_status(self.mirrors.mirror_of(pod)), status)
        # The UID makes the patch a precondition: it never lands on a newer pod of the same name.
        # A static pod's status goes to its mirror, whose UID is the apiserver's own.
        body = {"status": status} if pod.is_static else {"metadata": {"uid": uid}, "status": status}
        try:
            written = await self.kube.patch(f"{pod_path(pod.namespace, pod.name)}/status", body)
        except errors.NotFound:
            if not pod.is_static:  # a mirror pod may simply not exist yet: retried later
                self._dirty.discard(uid)
            return
        except errors.KubeError as e:
            log.warning("Failed to update pod status; will retry", pod=pod.full_name, err=str(e))
            return
        self._sent[uid] = status
        self._sent_version[uid] = _version(written if isinstance(written, dict) else None)
        # A newer status set while this one was on its way (the worker's Running after the
        # Pending being written) is still to be written: the kubelet's versioned statuses.
        if self._statuses.get(uid) == status:
            self._dirty.discard(uid)

    async def _delete(self, pod: Pod) -> None:
        assert self.kube is not None
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                   "preconditions": {"uid": pod.uid}}
        try:
            await self.kube.delete(pod_path(pod.namespace, pod.name), options)
            log.info("Pod deleted from the apiserver", pod=pod.full_name, uid=pod.uid)
        except (errors.NotFound, errors.Conflict):
            pass  # already gone, or a new pod of the same name
        except errors.KubeError as e:
            log.warning("Failed to delete pod; will retry", pod=pod.full_name, err=str(e))
            return
        self._deletions.pop(pod.uid, None)
        self.remove(pod.uid)
