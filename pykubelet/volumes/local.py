"""Node-local volumes: emptyDir (disk, or tmpfs for medium Memory) and hostPath (with its type
checks), laid out as the kubelet lays them out and torn down with the pod.

    <root-dir>/pods/<uid>/volumes/kubernetes.io~empty-dir/<name>   (runtime/paths.py)

Volumes from the API or the pod itself (configMap, secret, downwardAPI, projected) are in api.py.
"""

from __future__ import annotations

import os
import stat
import subprocess
from typing import Any

from pykubelet.api.pod import NODE_LOCAL_VOLUME_TYPES, Container, Pod, Volume
from pykubelet.api.quantity import quantity_bytes
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.runtime import data_dirs, paths
from pykubelet.runtime.env import ContainerConfigError, expand_required
from pykubelet.util import safe_remove
from pykubelet.util.log import get_logger
from pykubelet.util.mounts import is_mount_point, mount_points_under
from pykubelet.volumes import subpath

log = get_logger(__name__)

_HOST_PATH_CHECKS = {
    "Directory": (stat.S_ISDIR, "a directory"),
    "File": (stat.S_ISREG, "a file"),
    "Socket": (stat.S_ISSOCK, "a socket file"),
    "CharDevice": (stat.S_ISCHR, "a character device"),
    "BlockDevice": (stat.S_ISBLK, "a block device"),
}


# The CRI's names for the API's mountPropagation modes; unset and None are both private.
_PROPAGATION = {
    "": api.PROPAGATION_PRIVATE,
    "None": api.PROPAGATION_PRIVATE,
    "HostToContainer": api.PROPAGATION_HOST_TO_CONTAINER,
    "Bidirectional": api.PROPAGATION_BIDIRECTIONAL,
}


class VolumeSetupError(Exception):
    """A volume that cannot be set up, in the kubelet's words for its SetUp (no volume name)."""


def _mounted(path: str) -> bool:
    # mountinfo, not os.path.ismount: a bind of the same filesystem (a local PV) counts too.
    return is_mount_point(path)


def _empty_dir(root_dir: str, pod: Pod, name: str, source: dict[str, Any]) -> str:
    """The kubelet's emptyDir: a world-writable directory (0777, so any runAsUser can use it), or
    for medium Memory a tmpfs over it, whose root keeps tmpfs' own mode (1777, sticky). With an
    fsGroup, the volume ownership step: the group owns it, with rwx for it and setgid (files
    made in it inherit the group, so every container of the pod shares them)."""
    path = paths.volume_dir(root_dir, pod.uid, "kubernetes.io~empty-dir", name)
    os.makedirs(path, exist_ok=True)
    if not _mounted(path):
        os.chmod(path, 0o777)
        if (source or {}).get("medium") == "Memory":
            command = ["mount", "-t", "tmpfs"]
            if source.get("sizeLimit"):
                command += ["-o", f"size={quantity_bytes(source['sizeLimit'])}"]
            subprocess.run([*command, "tmpfs", path], check=True, capture_output=True)
    fs_group = pod.fs_group
    if fs_group is not None:
        os.chown(path, -1, fs_group)
        os.chmod(path, os.stat(path).st_mode & 0o7777 | stat.S_ISGID | 0o770)
    return path


def set_up_host_path(source: dict[str, Any]) -> str:
    """The kubelet's hostPath SetUp (a pod's volume or a PV's): nothing is mounted, the path is
    checked against its type (DirectoryOrCreate and FileOrCreate make it when nothing is there)."""
    path = source.get("path") or ""
    kind = source.get("type") or ""
    if not os.path.isabs(path):
        raise VolumeSetupError(f"hostPath.path must be absolute, got {path!r}")
    if ".." in path.split("/"):
        raise VolumeSetupError(f"invalid HostPath `{path}`: must not contain '..'")
    if kind == "DirectoryOrCreate":
        if not os.path.exists(path):
            os.makedirs(path, mode=0o755, exist_ok=True)
        kind = "Directory"  # made, or there: it must be a directory
    elif kind == "FileOrCreate":
        if not os.path.exists(path):
            os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644))
        kind = "File"
    if kind in _HOST_PATH_CHECKS:
        check, what = _HOST_PATH_CHECKS[kind]
        try:
            mode = os.stat(path).st_mode
        except OSError:
            mode = 0  # missing or unreadable: the kubelet says "is not" too
        if not check(mode):
            raise VolumeSetupError(f"hostPath type check failed: {path} is not {what}")
    elif kind:
        raise VolumeSetupError(f"{kind} is an invalid volume type")
    return path


def _set_up(root_dir: str, pod: Pod, volume: Volume) -> str | None:
    """The volume's host path, set up; None for a type that is not node-local."""
    if volume.kind == "emptyDir":
        return _empty_dir(root_dir, pod, volume.name, volume.source)
    if volume.kind == "hostPath":
        return set_up_host_path(volume.source)
    return None


def setup_volumes(root_dir: str, pod: Pod) -> dict[str, str]:
    """Volume name -> host path, creating what is missing (idempotent); ContainerConfigError
    naming the volume when one cannot be set up."""
    out = {}
    for volume in pod.volumes:
        try:
            path = _set_up(root_dir, pod, volume)
        except VolumeSetupError as e:
            raise ContainerConfigError(f"volume {volume.name}: {e}") from None
        if path is not None:
            out[volume.name] = path
    return out


def try_setup_volumes(root_dir: str, pod: Pod) -> dict[str, str]:
    """Set up every emptyDir and hostPath volume of the pod (the pod's directories first), each
    on its own: volume name -> why it could not be, for those that failed.

    One that failed leaves nothing half made behind it: the others stay set up, as the kubelet's
    do, for the next try, and are removed with the pod."""
    local = [v for v in pod.volumes if v.kind in NODE_LOCAL_VOLUME_TYPES]
    if not local:
        return {}
    try:
        data_dirs.ensure_pod_dirs(root_dir, pod.uid)
    except (OSError, ValueError) as e:  # ValueError: a UID that is not one plain name
        return {v.name: f"error making pod data directories: {e}" for v in local}
    failed = {}
    for volume in local:
        try:
            _set_up(root_dir, pod, volume)
        except (VolumeSetupError, OSError) as e:
            failed[volume.name] = str(e)
        except subprocess.CalledProcessError as e:
            failed[volume.name] = f"mount failed: {e.stderr.decode(errors='replace').strip() or e}"
    return failed


def container_mounts(root_dir: str, pod: Pod, container: Container, volumes: dict[str, str],
                     read_only: frozenset[str] | set[str] = frozenset(),
                     env: dict[str, str] | None = None) -> list[api.Mount]:
    """CRI mounts for the container's volumeMounts of the volumes set up (name -> host path);
    `env`: the container's environment, which subPathExpr is expanded with. Each mount carries
    its mountPropagation (validated when the pod was parsed, Bidirectional only if privileged).

    Volumes named in `read_only` are mounted read-only whatever the volumeMount says (configMap,
    secret...). A mount of a volume not set up is an error, never left out: the container would
    write its data into its own filesystem (the volume step keeps such a pod from starting,
    support.py). A subPath is bind-mounted safely first (subpath.py), so this blocks: call it in
    a thread.
    """
    declared = {v.name for v in pod.volumes}
    mounts = []
    for index, mount in enumerate(container.volume_mounts):
        name = mount.name
        if name not in declared:
            raise ContainerConfigError(f"volumeMount {name!r}: the pod has no volume of that name")
        if name not in volumes:
            raise ContainerConfigError(f"volumeMount {name!r}: its volume is not set up")
        host = volumes[name]
        sub_path = expand_required(mount.sub_path_expr, env or {}) if mount.sub_path_expr else mount.sub_path
        if sub_path:
            host = subpath.prepare(root_dir, subpath.SubPathMount(pod.uid, container.name, name, index, host,
                                                                  sub_path))
        mounts.append(api.Mount(container_path=mount.mount_path, host_path=host,
                                readonly=mount.read_only or name in read_only,
                                propagation=_PROPAGATION[mount.mount_propagation]))
    return mounts


def teardown_volumes(root_dir: str, uid: str) -> bool:
    """Unmount the pod's subPath binds and tmpfs volumes (emptyDir, secret...), then remove its
    directory (hostPath data is never touched); True when it is gone.

    While anything under the directory is still mounted it stays, for the next try: removing
    it would reach through the mount into a volume's or the host's files."""
    safe_remove.check_plain_name(uid)
    subpath.clean_sub_paths(root_dir, uid)
    volumes = paths.volumes_dir(root_dir, uid)
    for plugin in os.listdir(volumes) if os.path.isdir(volumes) else []:
        for name in os.listdir(os.path.join(volumes, plugin)):
            path = os.path.join(volumes, plugin, name)
            if _mounted(path):
                subprocess.run(["umount", path], check=False, capture_output=True)
    still_mounted = sorted(mount_points_under(os.path.realpath(paths.pod_dir(root_dir, uid))))
    if still_mounted:
        log.error("Pod directory kept: something under it is still mounted", pod=uid, mounts=still_mounted)
        return False
    return safe_remove.remove_child_dir(paths.pods_dir(root_dir), uid)  # never into a mount, nor outside pods/


def remove_orphaned_pod_dirs(root_dir: str, keep: set[str]) -> list[str]:
    """Tear down <root-dir>/pods/<uid> of pods nothing knows any more (the kubelet's
    cleanupOrphanedPodDirs): removed while the agent was down, their containers gone too.
    The UIDs whose directory went."""
    base = paths.pods_dir(root_dir)
    orphans = [uid for uid in (os.listdir(base) if os.path.isdir(base) else []) if uid not in keep]
    return [uid for uid in orphans if teardown_volumes(root_dir, uid)]
