"""Opening and creating paths inside a volume that a pod can change while we look at it.

A pod writes into its volumes, so any component of a subPath may be (or become) a symlink to
the host, a FIFO or a device. Everything here walks one component at a time with openat(2)
relative to the directory already opened, never following a symlink, so what a check saw is
what the next step uses (the kubelet's subpath_linux.go does the same). Blocking calls: run
them in a thread, never on the event loop.
"""

from __future__ import annotations

import os
import stat

# O_DIRECTORY wherever a directory is expected: opening a FIFO a pod put there for reading
# would block the thread forever.
_DIR_NOFOLLOW = os.O_RDONLY | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC
_PATH_NOFOLLOW = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafePath(OSError):
    """The path leaves its volume or goes through a symlink."""


def within_base(path: str, base: str) -> bool:
    """Lexically inside `base` (or `base` itself), for cleaned absolute paths."""
    rel = os.path.relpath(path, base)
    return rel != ".." and not rel.startswith("../")


def _segments(path: str, base: str) -> list[str]:
    rel = os.path.relpath(path, base)
    return rel.split(os.sep)


def safe_open(path: str, base: str) -> int:
    """An O_PATH descriptor of `path`, reached from `base` one component at a time; any symlink
    on the way (the base included) is refused. The caller closes it.

    Both paths must already be free of symlinks (resolved by the caller), so a symlink met
    here was put there by someone racing us."""
    path, base = os.path.normpath(path), os.path.normpath(base)
    if not within_base(path, base):
        raise UnsafePath(f"path {path} is outside of allowed base {base}")
    parent = os.open(base, _DIR_NOFOLLOW)
    current = base
    try:
        for segment in _segments(path, base):
            current = os.path.join(current, segment)
            if not within_base(current, base):
                raise UnsafePath(f"path {current} is outside of allowed base {base}")
            try:  # a trailing slash makes an automounted directory mount before we open it
                os.stat(segment + "/", dir_fd=parent, follow_symlinks=False)
            except OSError:
                pass
            child = os.open(segment, _PATH_NOFOLLOW, dir_fd=parent)
            os.close(parent)
            parent = child
            # With O_PATH|O_NOFOLLOW a symlink is opened itself rather than refused.
            if stat.S_ISLNK(os.fstat(parent).st_mode):
                raise UnsafePath(f"unexpected symlink found {current}")
        found, parent = parent, -1
        return found
    finally:
        if parent >= 0:
            os.close(parent)


def _existing_prefix(path: str, base: str) -> tuple[str, list[str]]:
    """The deepest existing directory on the way from `base` to `path`, and the components
    still missing below it. Symlinks are followed here; the caller checks where they led."""
    segments = _segments(path, base)
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    current = base
    try:
        for i, segment in enumerate(segments):
            try:
                # O_PATH: a FIFO a pod put in the way cannot block us
                child = os.open(segment, os.O_PATH | os.O_CLOEXEC, dir_fd=fd)
            except FileNotFoundError:
                return current, segments[i:]
            os.close(fd)
            fd = child
            current = os.path.join(current, segment)
        return path, []
    finally:
        os.close(fd)


def safe_make_dir(path: str, base: str, mode: int) -> None:
    """Create directory `path` and its missing parents inside `base` (resolved, no symlinks),
    each with `mode` exactly (umask and special bits included), never through a symlink.

    An existing directory is accepted as it is, like the kubelet (its whereabouts are checked
    again, race-free, when it is opened for the bind mount)."""
    path, base = os.path.normpath(path), os.path.normpath(base)
    if not within_base(path, base):
        raise UnsafePath(f"path {path} is outside of allowed base {base}")
    try:
        if stat.S_ISDIR(os.stat(path).st_mode):
            return
        raise NotADirectoryError(f"mkdir {path}: not a directory")
    except FileNotFoundError:
        pass
    existing, missing = _existing_prefix(path, base)
    resolved = os.path.realpath(existing, strict=True)
    if not within_base(resolved, base):
        raise UnsafePath(f"path {resolved} is outside of allowed base {base}")
    parent = safe_open(resolved, base)  # O_PATH: good enough as mkdirat's and openat's dirfd
    try:
        current = resolved
        for segment in missing:
            current = os.path.join(current, segment)
            os.mkdir(segment, mode & 0o777, dir_fd=parent)
            # A pod may swap what we just made for a symlink or FIFO: O_NOFOLLOW|O_DIRECTORY
            # refuses both. A directory it put there instead is no worse than its own.
            child = os.open(segment, _DIR_NOFOLLOW, dir_fd=parent)
            os.close(parent)
            parent = child
            os.fchmod(parent, mode & 0o7777)
    finally:
        os.close(parent)
