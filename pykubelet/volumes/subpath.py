"""volumeMounts[].subPath, made safe as the kubelet makes it.

Handing `<volume>/<subPath>` to the runtime is not safe: the pod owns the volume, and runc
follows symlinks, so `ln -s / <volume>/x` with `subPath: x` would mount the host's root.
Instead the subPath is opened component by component without following symlinks
(safe_open.py), checked to be inside the volume, and that open descriptor (not the path) is
bind-mounted to a directory only the agent writes:

    <root-dir>/pods/<uid>/volume-subpaths/<volume>/<container>/<volumeMount index>

which is what the runtime gets. The binds stay while the pod has its volumes and are unmounted
with them (clean_sub_paths). Blocking calls throughout: run in a thread.
"""

from __future__ import annotations

import os
import stat
import subprocess
from dataclasses import dataclass

from pykubelet.runtime import paths
from pykubelet.runtime.env import ContainerConfigError
from pykubelet.util.log import get_logger
from pykubelet.util.mounts import is_mount_point
from pykubelet.volumes.safe_open import UnsafePath, safe_make_dir, safe_open, within_base

log = get_logger(__name__)

# ValueError: a NUL byte in a subPath, refused by every path call
_FAILURES = (OSError, ValueError, subprocess.CalledProcessError)


@dataclass(frozen=True)
class SubPathMount:
    """One volumeMount with a subPath (subPathExpr already expanded)."""

    pod_uid: str
    container_name: str
    mount_name: str
    """The volumeMount's (and so the pod volume's) name."""
    index: int
    """The volumeMount's position in the container's volumeMounts."""
    volume_path: str
    """The volume's directory on the host."""
    sub_path: str


def check_sub_path(sub_path: str) -> None:
    """The kubelet's checks before it touches the disk, with its messages."""
    if sub_path.startswith("/"):
        raise ContainerConfigError(f"error SubPath `{sub_path}` must not be an absolute path")
    if ".." in sub_path.split("/"):
        raise ContainerConfigError(f"unable to provision SubPath `{sub_path}`: must not contain '..'")


def prepare(root_dir: str, mount: SubPathMount) -> str:
    """The host path to give the runtime for this subPath mount: the bind of what the subPath
    is inside the volume, created (as a directory) if missing. ContainerConfigError when that
    cannot be done safely; its message names no host path (the details go to the log)."""
    check_sub_path(mount.sub_path)
    host_path = os.path.join(mount.volume_path, mount.sub_path)
    who = f'volumeMount "{mount.mount_name}" of container "{mount.container_name}"'
    if not os.path.exists(host_path):  # follows symlinks: a link to the host counts as existing
        try:
            mode = os.stat(mount.volume_path).st_mode & 0o7777
            base = os.path.realpath(mount.volume_path, strict=True)
            safe_make_dir(os.path.join(base, mount.sub_path), base, mode)
        except _FAILURES as e:
            log.error("Failed to create subPath directory", pod=mount.pod_uid, container=mount.container_name,
                      volumeMount=mount.mount_name, err=str(e))
            raise ContainerConfigError(f"failed to create subPath directory for {who}") from None
    try:
        return _bind(root_dir, mount, host_path)
    except _FAILURES as e:
        log.error("Failed to prepare subPath", pod=mount.pod_uid, container=mount.container_name,
                  volumeMount=mount.mount_name, err=str(e))
        raise ContainerConfigError(f"failed to prepare subPath for {who}") from None


def _bind(root_dir: str, mount: SubPathMount, host_path: str) -> str:
    # Symlinks are resolved once, here; a link that stays inside the volume is fine (a
    # configMap key is one). From then on any symlink found is someone racing us.
    base = os.path.realpath(mount.volume_path, strict=True)
    resolved = os.path.realpath(host_path, strict=True)
    if not within_base(resolved, base):
        raise UnsafePath(f"subpath {resolved!r} not within volume path {base!r}")
    fd = safe_open(resolved, base)
    try:
        source = os.fstat(fd)
        target = paths.volume_subpath(root_dir, mount.pod_uid, mount.mount_name, mount.container_name, mount.index)
        if is_mount_point(target):
            if _same_file(os.stat(target), source):
                return target
            _unmount(target)
        _make_target(target, stat.S_ISDIR(source.st_mode))
        try:
            # The kernel resolves /proc/<pid>/fd/<n> to the file we opened, whatever the
            # path names by now; --no-canonicalize keeps mount(8) from resolving it itself.
            done = subprocess.run(["mount", "--no-canonicalize", "--bind", f"/proc/{os.getpid()}/fd/{fd}", target],
                                  capture_output=True, text=True)
            if done.returncode != 0:
                raise OSError(f"error mounting {resolved}: {done.stderr.strip()}")
        except _FAILURES:
            _remove_target(target)
            raise
        return target
    finally:
        os.close(fd)


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _make_target(target: str, directory: bool) -> None:
    """The mount point: a directory for a directory, else an empty file (a file works for files,
    FIFOs, sockets and devices alike)."""
    os.makedirs(os.path.dirname(target), mode=0o750, exist_ok=True)
    try:
        if stat.S_ISDIR(os.lstat(target).st_mode) != directory:
            _remove_target(target)  # left from an earlier bind of another kind of file
    except FileNotFoundError:
        pass
    if directory:
        try:
            os.mkdir(target, 0o750)
        except FileExistsError:
            pass
    else:
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640))


def _unmount(target: str) -> None:
    """Unmount (binds may be stacked) until `target` is no mount point; OSError if it stays one."""
    for _ in range(10):
        if not is_mount_point(target):
            return
        done = subprocess.run(["umount", target], capture_output=True, text=True)
        if done.returncode != 0 and is_mount_point(target):
            raise OSError(f"cannot unmount {target}: {done.stderr.strip()}")
    if is_mount_point(target):
        raise OSError(f"{target} is still a mount point")


def _remove_target(target: str) -> None:
    """Unmount and remove one bind target; rmdir and unlink only, so nothing behind a mount
    point is ever touched."""
    _unmount(target)
    try:
        if stat.S_ISDIR(os.lstat(target).st_mode):
            os.rmdir(target)
        else:
            os.unlink(target)
    except FileNotFoundError:
        pass


def clean_sub_paths(root_dir: str, uid: str) -> bool:
    """Unmount and remove the pod's subPath binds and their directories; True when none is left
    (what could not be unmounted stays, with the directories above it, for a later try)."""
    top = paths.volume_subpaths_dir(root_dir, uid)
    clean = True
    for volume in _entries(top):
        for container in _entries(volume):
            for target in _entries(container):
                try:
                    _remove_target(target)
                except _FAILURES as e:
                    log.error("Failed to clean up a subPath bind mount", pod=uid, path=target, err=str(e))
                    clean = False
            _remove_empty(container)
        _remove_empty(volume)
    _remove_empty(top)
    return clean and not os.path.lexists(top)


def _entries(directory: str) -> list[str]:
    try:
        return [os.path.join(directory, name) for name in os.listdir(directory)]
    except (FileNotFoundError, NotADirectoryError):
        return []


def _remove_empty(directory: str) -> None:
    try:
        os.rmdir(directory)
    except OSError:
        pass  # not empty (something failed to go) or already gone
