"""Removing a directory the agent made, and nothing else.

`remove_child_dir(parent, name)` removes `parent/name` only when `name` is one plain path
component, and walks it through directory file descriptors without following a symlink. It never
descends into a mount point: not into another filesystem (a different st_dev), nor into a bind
mount of the same filesystem (listed in /proc/self/mountinfo). Whatever sits on such a mount is
not the agent's to delete (a pod's hostPath, a volume still mounted), so the mount point and the
directories above it stay, and the caller hears that the removal was incomplete.
"""

from __future__ import annotations

import errno
import os
import re
import stat

MOUNTINFO = "/proc/self/mountinfo"
_OCTAL = re.compile(r"\\([0-7]{3})")


class UnsafeName(ValueError):
    """A name that is not one plain component of a path (empty, '.', '..', or with a '/')."""


def check_plain_name(name: str) -> None:
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise UnsafeName(f"{name!r} is not a plain directory name")


def _unescape(field: str) -> str:
    # mountinfo writes space, tab, newline and backslash as \ooo (octal).
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


def mount_points_under(directory: str) -> set[str]:
    """Every mount point at or below `directory` (a resolved path), as this process sees them."""
    prefix = directory.rstrip("/") + "/"
    try:
        with open(MOUNTINFO, encoding="utf-8", errors="surrogateescape") as f:
            points = {_unescape(line.split(" ")[4]) for line in f if line.count(" ") >= 5}
    except OSError:
        return set()
    return {p for p in points if p == directory or p.startswith(prefix)}


def remove_child_dir(parent: str, name: str) -> bool:
    """Remove parent/name and everything under it on the same mount; True when it is gone.

    parent/name itself being a symlink or a plain file: only that entry goes. Nothing is removed
    through a symlink, and nothing on (or above) a mount point inside it.
    """
    check_plain_name(name)
    parent = os.path.realpath(parent)
    path = os.path.join(parent, name)
    mounts = mount_points_under(path)
    if path in mounts:
        return False
    try:
        parent_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return True
    try:
        try:
            st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        except FileNotFoundError:
            return True
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(name, dir_fd=parent_fd)
            return True
        if st.st_dev != os.fstat(parent_fd).st_dev:
            return False
        return _remove_tree(parent_fd, name, path, st.st_dev, mounts)
    finally:
        os.close(parent_fd)


def _remove_tree(parent_fd: int, name: str, path: str, device: int, mounts: set[str]) -> bool:
    """Remove the directory `name` in parent_fd (at `path`); False if something had to stay."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
    except FileNotFoundError:
        return True
    complete = True
    try:
        if os.fstat(fd).st_dev != device or path in mounts:
            return False
        for entry in list(os.scandir(fd)):
            child = os.path.join(path, entry.name)
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                if st.st_dev != device or child in mounts:
                    complete = False
                    continue
                complete = _remove_tree(fd, entry.name, child, device, mounts) and complete
            else:
                try:
                    os.unlink(entry.name, dir_fd=fd)
                except FileNotFoundError:
                    pass
    finally:
        os.close(fd)
    if not complete:
        return False
    try:
        os.rmdir(name, dir_fd=parent_fd)
    except FileNotFoundError:
        pass
    except OSError as e:
        if e.errno in (errno.EBUSY, errno.ENOTEMPTY):  # a mount appeared, or a file arrived meanwhile
            return False
        raise
    return True
