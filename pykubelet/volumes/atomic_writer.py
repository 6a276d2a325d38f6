"""The kubelet's AtomicWriter: a volume's files change all at once, never half-written.

    <dir>/..2026_12_02_15_04_05.123456   the payload, written in full first
    <dir>/..data -> ..2026_12_02_15_04_05.123456   swapped with one rename(2)
    <dir>/<key> -> ..data/<key>          the paths the user sees, through ..data

A reader who opens <key> sees either the old payload or the new one. Keys that left the payload
lose their link; the old timestamped directory is removed last.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass

DATA_DIR = "..data"
_DATA_TMP = "..data_tmp"


@dataclass(frozen=True)
class FileProjection:
    data: bytes
    mode: int = 0o644
    uid: int | None = None
    """Owner of the file (fsUser); None keeps root."""


class PayloadError(ValueError):
    """A path in the payload that may not be written (absolute, or climbing out with ..)."""


def validate_path(path: str) -> None:
    if not path:
        raise PayloadError("invalid path: must not be empty")
    if os.path.isabs(path):
        raise PayloadError(f"invalid path {path!r}: must be relative")
    if len(path) > 4096:
        raise PayloadError(f"invalid path {path!r}: must be less than or equal to 4096 characters")
    parts = path.split("/")
    if ".." in parts:
        raise PayloadError(f"invalid path {path!r}: must not contain '..'")
    if path.startswith(".."):
        raise PayloadError(f"invalid path {path!r}: must not start with '..'")


def _current(target: str) -> str | None:
    """The timestamped directory ..data points at, or None before the first write."""
    try:
        return os.path.join(target, os.readlink(os.path.join(target, DATA_DIR)))
    except OSError:
        return None


def _files_in(directory: str) -> set[str]:
    out = set()
    for root, _, files in os.walk(directory):
        for name in files:
            out.add(os.path.relpath(os.path.join(root, name), directory))
    return out


def _file_mode(projection: FileProjection, fs_group: int | None) -> int:
    # With an fsGroup the kubelet makes a read-only volume's files group-readable (SetVolumeOwnership).
    # Never setuid/setgid/sticky: the API allows modes 0-0777 only, and a file the agent writes as
    # root must not become a setuid program whatever a manifest says.
    mode = projection.mode & 0o777
    return mode | 0o440 if fs_group is not None else mode


def _unchanged(directory: str, payload: dict[str, FileProjection], fs_group: int | None) -> bool:
    if _files_in(directory) != set(payload):
        return False
    for path, projection in payload.items():
        full = os.path.join(directory, path)
        stat = os.lstat(full)
        if stat.st_mode & 0o7777 != _file_mode(projection, fs_group) or \
                (projection.uid is not None and stat.st_uid != projection.uid) or \
                (fs_group is not None and stat.st_gid != fs_group):
            return False
        with open(full, "rb") as f:
            if f.read() != projection.data:
                return False
    return True


def _top(path: str) -> str:
    return os.path.normpath(path).split("/")[0]


def _write_file(full: str, projection: FileProjection, fs_group: int | None) -> None:
    """A new file with its owner and final mode set before any byte of it is written: a secret
    is never readable, even for a moment, by anyone its mode does not let in."""
    fd = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        if projection.uid is not None or fs_group is not None:
            os.fchown(fd, -1 if projection.uid is None else projection.uid, -1 if fs_group is None else fs_group)
        os.fchmod(fd, _file_mode(projection, fs_group))  # after fchown (which may clear bits); past the umask
        view = memoryview(projection.data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def _write_payload(new: str, payload: dict[str, FileProjection], fs_group: int | None) -> None:
    os.chmod(new, 0o755)
    for path, projection in payload.items():
        full = os.path.join(new, path)
        os.makedirs(os.path.dirname(full), mode=0o755, exist_ok=True)
        _write_file(full, projection, fs_group)
    if fs_group is not None:
        for root, dirs, _ in os.walk(new):
            for directory in [root, *(os.path.join(root, d) for d in dirs)]:
                os.chown(directory, -1, fs_group)
                os.chmod(directory, 0o2755 | 0o550)  # setgid, as SetVolumeOwnership leaves it


def write_atomic(target: str, payload: dict[str, FileProjection], fs_group: int | None = None) -> bool:
    """Make `target` show exactly `payload`; False when it already did (nothing written).

    `fs_group`: the pod's fsGroup; files and directories then belong to that group, readable by it.
    A failure (a full disk) leaves `target` as it was: the half-written payload is removed.
    """
    for path in payload:
        validate_path(path)
    payload = {os.path.normpath(p): v for p, v in payload.items()}
    os.makedirs(target, exist_ok=True)
    old = _current(target)
    old_visible = {_top(p) for p in _files_in(old)} if old and os.path.isdir(old) else set()
    if old and os.path.isdir(old) and _unchanged(old, payload, fs_group):
        return False

    new = tempfile.mkdtemp(prefix=time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime()), dir=target)
    link_tmp = os.path.join(target, _DATA_TMP)
    try:
        _write_payload(new, payload, fs_group)
        if os.path.lexists(link_tmp):
            os.remove(link_tmp)
        os.symlink(os.path.basename(new), link_tmp)
        os.rename(link_tmp, os.path.join(target, DATA_DIR))  # the one step readers can observe
    except BaseException:
        shutil.rmtree(new, ignore_errors=True)
        if os.path.islink(link_tmp):
            os.remove(link_tmp)
        raise

    visible = {_top(p) for p in payload}
    for name in visible:
        link = os.path.join(target, name)
        if not os.path.lexists(link):
            os.symlink(os.path.join(DATA_DIR, name), link)
    for name in old_visible - visible:
        link = os.path.join(target, name)
        if os.path.islink(link):
            os.remove(link)
    if old and old != new:
        shutil.rmtree(old, ignore_errors=True)
    return True
