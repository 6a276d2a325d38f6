"""Volumes whose content comes from the API or the pod itself: configMap, secret, downwardAPI
and projected (service account token, configMap, secret, downwardAPI), laid out as the
kubelet lays them out and written with its AtomicWriter:

    <root-dir>/pods/<uid>/volumes/kubernetes.io~configmap/<name>/{..data, <key> -> ..data/<key>}

secret, downwardAPI and projected volumes sit on a tmpfs (the kubelet wraps them in a memory
emptyDir), so secrets never touch the disk. Every sync of the pod writes them again: a
changed object, label or a token due for refresh reaches the files, atomically. Mounted into
containers read-only, whatever the volumeMount says.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from dataclasses import dataclass
from typing import Any

from pykubelet.api.pod import Pod
from pykubelet.api.references import referenced_names
from pykubelet.kube import errors as kube_errors
from pykubelet.kube.objects import SINGULAR, NotSynced, ObjectCache, ObjectNotFound, ServiceCache
from pykubelet.kube.tokens import DEFAULT_EXPIRATION_SECONDS, TokenManager
from pykubelet.runtime import data_dirs, paths, security
from pykubelet.util import safe_remove
from pykubelet.volumes import subpath
from pykubelet.volumes.claim_volumes import ClaimVolumes
from pykubelet.volumes.csi.node import CsiNode
from pykubelet.volumes.atomic_writer import DATA_DIR, FileProjection, PayloadError, write_atomic
from pykubelet.volumes.projection import (DEFAULT_MODE, MountError, aggregate, downward_api_payload,
                                          object_payload)

PLUGIN_DIRS = {
    "configMap": "kubernetes.io~configmap",
    "secret": "kubernetes.io~secret",
    "downwardAPI": "kubernetes.io~downward-api",
    "projected": "kubernetes.io~projected",
}
IN_MEMORY = ("secret", "downwardAPI", "projected")


@dataclass
class ApiClients:
    """The apiserver-backed caches a node has; None in standalone mode."""

    objects: ObjectCache
    tokens: TokenManager
    services: ServiceCache
    csi: CsiNode | None = None
    """The registered CSI drivers and the set-up of CSI PVs (None: no driver can register)."""


def volume_paths(root_dir: str, pod: Pod) -> dict[str, str]:
    """Volume name -> host directory, for the pod's volumes of these types."""
    out = {}
    for volume in pod.volumes:
        if volume.kind in PLUGIN_DIRS:
            out[volume.name] = paths.volume_dir(root_dir, pod.uid, PLUGIN_DIRS[volume.kind], volume.name)
    return out


def is_set_up(path: str) -> bool:
    """Whether the volume was written at least once (its ..data link exists)."""
    return os.path.islink(os.path.join(path, DATA_DIR))


def _write(path: str, payload: dict[str, FileProjection], in_memory: bool, fs_group: int | None) -> None:
    data_dirs.make_dir(os.path.dirname(path))  # the plugin's directory, and the pod's if missing: 0750
    os.makedirs(path, exist_ok=True)
    if in_memory and not os.path.ismount(path):
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", path], check=True, capture_output=True)
    os.chmod(path, 0o777)  # as the kubelet's wrapping emptyDir leaves it: any runAsUser gets in
    try:
        write_atomic(path, payload, fs_group)
    except PayloadError as e:
        raise MountError(str(e)) from None


def fs_user_of(pod: Pod) -> int | None:
    """The user every container of the pod runs as, when they all set the same one (FsUserFrom):
    the owner of the pod's service account token files."""
    users = {security.effective(pod, c).get("runAsUser") for c in (*pod.init_containers, *pod.containers)}
    user = users.pop() if len(users) == 1 else None
    return int(user) if user is not None else None


def _remove(paths: list[str]) -> None:
    for path in paths:
        if os.path.ismount(path):
            subprocess.run(["umount", path], check=False, capture_output=True)
        safe_remove.remove_child_dir(os.path.dirname(path), os.path.basename(path))  # still mounted: left


class ApiVolumes:
    def __init__(self, root_dir: str, allocatable: dict[str, float], clients: ApiClients | None,
                 node_name: str = ""):
        self.root_dir = root_dir
        self.allocatable = allocatable
        self.clients = clients
        # PersistentVolumeClaims: read with direct GETs, as the kubelet reads them.
        self.claims = ClaimVolumes(root_dir, node_name, clients.objects.kube.get if clients is not None else None,
                                   clients.csi.volumes if clients is not None and clients.csi is not None else None)

    def register(self, pod: Pod) -> None:
        """Start (or adjust) the watches of the objects the pod refers to."""
        if self.clients is not None:
            self.clients.objects.register(pod.uid, pod.namespace, referenced_names(pod.raw))

    def forget(self, uid: str) -> None:
        self.claims.forget(uid)
        if self.clients is not None:
            self.clients.objects.unregister(uid)
            self.clients.tokens.forget(uid)

    async def teardown(self, pod: Pod) -> None:
        """Unmount and remove these volumes of a pod that finished for good, and stop watching
        its objects (the kubelet unmounts a terminated pod's volumes; its directory stays)."""
        # The kubelet unmounts a volume's subPath binds with it; this pod starts no container again.
        await asyncio.to_thread(subpath.clean_sub_paths, self.root_dir, pod.uid)
        await asyncio.to_thread(_remove, list(volume_paths(self.root_dir, pod).values()))
        await self.claims.teardown(pod)  # before forget: it names the local mounts to release
        self.forget(pod.uid)

    async def setup(self, pod: Pod) -> dict[str, str]:
        """Write every such volume of the pod; volume name -> why it failed, for those that did."""
        self.register(pod)
        directories = volume_paths(self.root_dir, pod)
        failed = {}
        for volume in pod.volumes:
            name, kind = volume.name, volume.kind
            if kind not in PLUGIN_DIRS:
                continue
            try:
                payload = await self._payload(pod, kind, volume.source)
                await asyncio.to_thread(_write, directories[name], payload, kind in IN_MEMORY, pod.fs_group)
            except (MountError, OSError, subprocess.CalledProcessError) as e:
                failed[name] = str(e)
        return failed

    async def _object(self, pod: Pod, resource: str, name: str, optional: bool) -> dict[str, Any] | None:
        if self.clients is None:
            raise MountError(f"couldn't get {SINGULAR[resource]} {pod.namespace}/{name}, no kubeClient defined")
        try:
            return await self.clients.objects.get(resource, pod.namespace, name)
        except ObjectNotFound as e:
            if optional:
                return None
            raise MountError(str(e)) from None
        except NotSynced as e:
            raise MountError(str(e)) from None

    async def _payload(self, pod: Pod, kind: str, source: dict[str, Any]) -> dict[str, FileProjection]:
        mode = source.get("defaultMode", DEFAULT_MODE)
        optional = bool(source.get("optional"))
        if kind == "configMap":
            obj = await self._object(pod, "configmaps", source.get("name", ""), optional)
            return object_payload("configmap", obj, source.get("items"), mode, optional)
        if kind == "secret":
            obj = await self._object(pod, "secrets", source.get("secretName", ""), optional)
            return object_payload("secret", obj, source.get("items"), mode, optional)
        if kind == "downwardAPI":
            return downward_api_payload(pod, source.get("items"), mode, self.allocatable)
        return await self._projected(pod, source, mode)

    async def _projected(self, pod: Pod, source: dict[str, Any], mode: int) -> dict[str, FileProjection]:
        payload: dict[str, FileProjection] = {}
        problems = []
        for item in source.get("sources") or []:
            try:
                if item.get("configMap") is not None or item.get("secret") is not None:
                    kind = "configmap" if item.get("configMap") is not None else "secret"
                    ref = item.get("configMap") if kind == "configmap" else item.get("secret")
                    optional = bool(ref.get("optional"))
                    obj = await self._object(pod, f"{kind}s", ref.get("name", ""), optional)
                    payload.update(object_payload(kind, obj, ref.get("items"), mode, optional))
                elif item.get("downwardAPI") is not None:
                    payload.update(downward_api_payload(pod, item["downwardAPI"].get("items"), mode,
                                                        self.allocatable))
                elif item.get("serviceAccountToken") is not None:
                    payload.update(await self._token(pod, item["serviceAccountToken"], mode))
                else:
                    problems.append(f"unsupported projected volume source: {', '.join(item) or '(empty)'}")
            except MountError as e:
                problems.append(str(e))
        if problems:
            raise MountError(aggregate(problems))
        return payload

    async def _token(self, pod: Pod, source: dict[str, Any], mode: int) -> dict[str, FileProjection]:
        if self.clients is None:
            raise MountError("failed to fetch token: no kubeClient defined")
        account = pod.raw.get("spec", {}).get("serviceAccountName") or "default"
        try:
            token = await self.clients.tokens.get(
                pod.namespace, account, pod.name, pod.uid, source.get("audience") or "",
                int(source.get("expirationSeconds") or DEFAULT_EXPIRATION_SECONDS))
        except kube_errors.KubeError as e:
            raise MountError(f"failed to fetch token: {e.message or e}") from None
        fs_user = fs_user_of(pod)
        if fs_user is not None or pod.fs_group is not None:
            mode = 0o600  # the kubelet's: readable by the pod's one user, or 0640 after the fsGroup step
        return {source.get("path", "token"): FileProjection(token.encode(), mode, fs_user)}
