"""The kubelet's volume ownership step for fsGroup (its ChangePermissions), done safely.

Every file and directory of the volume gets the pod's fsGroup as group, read-write for it
(read-only for a read-only volume), and directories also setgid and search, so what the pod's
containers make stays shared. With fsGroupChangePolicy OnRootMismatch the walk is skipped when
the volume's root already looks done. Errors on single files are logged, not raised, as the
kubelet's are.

The pod owns the volume and may swap a directory for a symlink while we walk, so the walk goes
through directory file descriptors and never follows a symlink: nothing outside the volume is
touched. Blocking throughout: run in a thread.
"""

from __future__ import annotations

import os
import stat

from pykubelet.util.log import get_logger

log = get_logger(__name__)

ON_ROOT_MISMATCH = "OnRootMismatch"
_RW, _RO, _EXEC = 0o660, 0o440, 0o110


def _needs_change(root: str, fs_group: int, read_only: bool) -> bool:
    """OnRootMismatch: whether the root misses the group, the setgid bit or the group's bits."""
    try:
        info = os.stat(root)
    except OSError:
        return True
    wanted = (_RO if read_only else _RW) | _EXEC
    return (info.st_gid != fs_group or not stat.S_ISDIR(info.st_mode)
            or info.st_mode & wanted != wanted or not info.st_mode & stat.S_ISGID)


def _change(name: str, dir_fd: int, info: os.stat_result, fs_group: int, read_only: bool) -> None:
    """The kubelet's changeFilePermission on one entry of the directory `dir_fd`."""
    try:
        os.chown(name, -1, fs_group, dir_fd=dir_fd, follow_symlinks=False)
    except OSError as e:
        log.error("Lchown failed", path=name, err=str(e))
    if stat.S_ISLNK(info.st_mode):
        return
    mask = _RO if read_only else _RW
    if stat.S_ISDIR(info.st_mode):
        mask |= stat.S_ISGID | _EXEC
    try:
        # chmod through an O_PATH descriptor: the entry we looked at, never what a link names.
        fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        try:
            os.chmod(f"/proc/self/fd/{fd}", stat.S_IMODE(info.st_mode) | mask)
        finally:
            os.close(fd)
    except OSError as e:
        log.error("chmod failed", path=name, err=str(e))


def _walk(dir_fd: int, fs_group: int, read_only: bool, depth: int) -> int:
    """Change every entry below `dir_fd`, children before their directory; the entries done."""
    done = 0
    for entry in list(os.scandir(dir_fd)):
        try:
            info = os.stat(entry.name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            continue  # gone meanwhile
        if stat.S_ISDIR(info.st_mode) and depth < 256:
            try:
                child = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                                dir_fd=dir_fd)
            except OSError:
                child = -1  # swapped for something else: only the entry itself is changed
            if child >= 0:
                try:
                    done += _walk(child, fs_group, read_only, depth + 1)
                finally:
                    os.close(child)
        _change(entry.name, dir_fd, info, fs_group, read_only)
        done += 1
    return done


def change_ownership(root: str, fs_group: int | None, policy: str, read_only: bool) -> int:
    """Apply the fsGroup to the volume at `root` (a directory the agent mounted); the entries
    changed (0 when skipped)."""
    if fs_group is None:
        return 0
    if policy == ON_ROOT_MISMATCH and not _needs_change(root, fs_group, read_only):
        return 0
    parent_fd = os.open(os.path.dirname(root), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        name = os.path.basename(root)
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
        try:
            done = _walk(fd, fs_group, read_only, 0)
        finally:
            os.close(fd)
        _change(name, parent_fd, os.stat(name, dir_fd=parent_fd, follow_symlinks=False), fs_group, read_only)
        return done + 1
    finally:
        os.close(parent_fd)
