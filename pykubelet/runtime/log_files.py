"""The file work of a log rotation: blocking, so callers run it in a worker thread.

A container's log directory is opened beneath the pod logs root one component at a time without
following a symlink (util/nofollow.py), and every later step (stat, rename, remove, compress)
names a plain entry of that open directory, again without following a link. A log path outside
the pod logs root (a container another CRI client made) is refused: its files are not the agent's.
"""

from __future__ import annotations

import errno
import gzip
import os
import shutil
import stat

from pykubelet.runtime.rotated_logs import COMPRESSED_SUFFIX, TEMPORARY_SUFFIX, rotated_names
from pykubelet.util import nofollow

COPY_CHUNK = 256 * 1024
GZIP_LEVEL = 6  # Go's gzip default, as the kubelet compresses


class NotBeneathLogsRoot(ValueError):
    """A log path that is not a file below the pod logs root."""


def _not_regular(name: str) -> OSError:
    return OSError(errno.EINVAL, f"{name} is not a regular file")


class LogDirectory:
    """One container's log directory, open; `name` is its live log file's name."""

    def __init__(self, logs_root: str, log_path: str):
        root = os.path.abspath(logs_root)
        relative = os.path.relpath(os.path.abspath(log_path), root)
        parts = relative.split(os.sep)
        if relative.startswith("..") or len(parts) < 2:
            raise NotBeneathLogsRoot(f"log {log_path!r} is not below the pod logs dir {root!r}")
        self.name = parts[-1]
        self.fd = nofollow.open_beneath(root, parts[:-1])  # OSError (ELOOP) through a symlink
        if not stat.S_ISDIR(os.fstat(self.fd).st_mode):
            os.close(self.fd)
            raise NotADirectoryError(errno.ENOTDIR, f"{os.path.dirname(log_path)} is not a directory")

    def close(self) -> None:
        os.close(self.fd)

    def names(self) -> list[str]:
        return os.listdir(self.fd)

    def rotated(self) -> list[str]:
        """The live file's rotated files, left-overs included."""
        return rotated_names(self.name, self.names())

    def size(self) -> int | None:
        """The live file's size; None when there is none. A symlink or a FIFO there is an error."""
        try:
            st = os.stat(self.name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if not stat.S_ISREG(st.st_mode):
            raise _not_regular(self.name)
        return st.st_size

    def remove(self, name: str) -> None:
        try:
            os.unlink(name, dir_fd=self.fd)
        except FileNotFoundError:
            pass

    def rename(self, old: str, new: str) -> None:
        os.rename(old, new, src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def compress(self, name: str) -> None:
        """`name` -> `name.gz` (written as `name.tmp`, then renamed), keeping the file's mode; then
        `name` goes. A failure leaves `name` as it was."""
        source = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=self.fd)
        with open(source, "rb") as reader:
            st = os.fstat(source)
            if not stat.S_ISREG(st.st_mode):
                raise _not_regular(name)
            temporary = name + TEMPORARY_SUFFIX
            target = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                             stat.S_IMODE(st.st_mode), dir_fd=self.fd)
            try:
                with open(target, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw,
                                                              compresslevel=GZIP_LEVEL) as packed:
                    shutil.copyfileobj(reader, packed, COPY_CHUNK)
                self.rename(temporary, name + COMPRESSED_SUFFIX)
            except BaseException:
                self.remove(temporary)
                raise
        self.remove(name)


def remove_log_files(logs_root: str, log_path: str) -> None:
    """A removed container's live log file and every rotated one (the kubelet's Clean)."""
    directory = LogDirectory(logs_root, log_path)
    try:
        for name in [directory.name, *directory.rotated()]:
            directory.remove(name)
    finally:
        directory.close()
