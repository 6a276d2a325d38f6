"""Reading files that something untrusted may have touched, without following its links or
waiting on its pipes: every path component is opened with O_NOFOLLOW from a trusted directory,
the file non-blocking (a FIFO or device does not hang the reader), and only a regular file is read.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Sequence

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC


def open_beneath(base: str, parts: Sequence[str]) -> int:
    """A read-only fd of base/parts[0]/.../parts[-1]; OSError (ELOOP for a symlink) if any of
    the parts is a link. `base` itself is trusted and may be reached through links."""
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for i, part in enumerate(parts):
            if not part or part in (".", "..") or "/" in part:
                raise OSError(errno.EINVAL, f"{part!r} is not a plain name")
            child = os.open(part, _FILE if i == len(parts) - 1 else _DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        return fd
    except BaseException:
        os.close(fd)
        raise


def open_file(path: str) -> int:
    """A read-only fd of `path`, which must not be a symlink itself (its directories may be)."""
    return os.open(path, _FILE)


def read_tail(fd: int, limit: int) -> bytes:
    """The last `limit` bytes of the regular file open at `fd`; OSError for anything else."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise OSError(errno.EINVAL, "not a regular file")
    start = max(0, st.st_size - limit)
    chunks = []
    while chunk := os.pread(fd, st.st_size - start, start):
        chunks.append(chunk)
        start += len(chunk)
        if start >= st.st_size:
            break
    return b"".join(chunks)
