"""Replacing a file so that readers and a power loss see either the old content or the new, in
full: write a temporary file beside it (with its final mode from the start), fsync it, rename it
over the old one, fsync the directory (which makes the rename itself durable).
"""

from __future__ import annotations

import os
import tempfile


def fsync_dir(directory: str) -> None:
    fd = os.open(directory or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file(path: str, data: bytes, mode: int) -> None:
    """Put `data` at `path` atomically and durably; the file has `mode` (not subject to the
    umask) before any byte is written. On failure (a full disk) nothing is left behind."""
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.")  # 0600
    try:
        try:
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(directory)


def replace(src: str, dst: str) -> None:
    """os.replace, made durable: for a new symlink or a file already synced."""
    os.replace(src, dst)
    fsync_dir(os.path.dirname(dst))

