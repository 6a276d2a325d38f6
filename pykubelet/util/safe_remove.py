"""Removing a directory the agent made, and nothing else.

`remove_child_dir(parent, name)` removes `parent/name` only when `name` is one plain path
component, and walks it through directory file descriptors without following a symlink. It never
descends into a mount point: not into another filesystem (a different st_dev), nor into a bind
mount of the same filesystem (listed in /proc/self/mountinfo). Whatever sits on such a mount is
not the agent's to delete (a pod's hostPath, a volume still mounted), so the mount point and the
directories above it stay, and the caller hears that the removal was incomplete.
"""

from __future__ import annotations

import os
import secrets
import stat

from pykubelet.util.mounts import mount_points_under

MAX_DEPTH = 64  # directory levels walked at once; deeper ones are moved up (see _remove_tree)


class UnsafeName(ValueError):
    """A name that is not one plain component of a path (empty, '.', '..', or with a '/')."""


def check_plain_name(name: str) -> None:
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise UnsafeName(f"{name!r} is not a plain directory name")


def remove_child_dir(parent: str, name: str) -> bool:
    """Remove parent/name and everything under it on the same mount; True when it is gone.

    parent/name itself being a symlink or a plain file: only that entry goes. Nothing is removed
    through a symlink, and nothing on (or above) a mount point inside it. Whatever cannot be
    removed (a mount, an immutable file) stays, and the answer is False: this never raises for it.
    """
    check_plain_name(name)
    parent = os.path.realpath(parent)
    path = os.path.join(parent, name)
    try:
        parent_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    try:
        st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(name, dir_fd=parent_fd)
            return True
        if st.st_dev != os.fstat(parent_fd).st_dev or path in mount_points_under(path):
            return False
        return _remove_tree(parent_fd, name, path, st.st_dev)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    finally:
        os.close(parent_fd)


def _open_dir(name: str, dir_fd: int) -> int:
    return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)


def _remove_tree(parent_fd: int, name: str, path: str, device: int) -> bool:
    """Remove the directory `name` in parent_fd (at `path`); False if something had to stay.

    A pod can nest directories without limit. Rather than hold a file descriptor (and a stack
    frame) per level, directories deeper than MAX_DEPTH are moved up to the top and removed in
    another pass."""
    fd = _open_dir(name, parent_fd)
    try:
        if os.fstat(fd).st_dev != device:
            return False
        while True:
            mounts = mount_points_under(path)  # again each pass: a moved directory's mounts moved with it
            complete, moved = _empty(fd, path, device, mounts, fd, 1)
            if not moved:
                break
    finally:
        os.close(fd)
    if not complete:
        return False
    os.rmdir(name, dir_fd=parent_fd)  # EBUSY/ENOTEMPTY (a mount or a file arrived meanwhile): False above
    return True


def _empty(fd: int, path: str, device: int, mounts: set[str], top_fd: int, depth: int) -> tuple[bool, bool]:
    """Remove what is in the directory open at `fd`: (nothing had to stay, something was moved up)."""
    complete, moved = True, False
    for entry in list(os.scandir(fd)):
        child = os.path.join(path, entry.name)
        try:
            st = entry.stat(follow_symlinks=False)
            if not stat.S_ISDIR(st.st_mode):
                os.unlink(entry.name, dir_fd=fd)
                continue
            if st.st_dev != device or child in mounts:
                complete = False
                continue
            if depth >= MAX_DEPTH:
                os.rename(entry.name, f"..deep-{secrets.token_hex(8)}", src_dir_fd=fd, dst_dir_fd=top_fd)
                moved = True
                continue
            child_fd = _open_dir(entry.name, fd)
            try:
                if os.fstat(child_fd).st_dev != device:
                    complete = False
                    continue
                child_complete, child_moved = _empty(child_fd, child, device, mounts, top_fd, depth + 1)
            finally:
                os.close(child_fd)
            moved |= child_moved
            if child_complete:
                os.rmdir(entry.name, dir_fd=fd)
            complete &= child_complete
        except FileNotFoundError:
            continue
        except OSError:
            complete = False
    return complete, moved
