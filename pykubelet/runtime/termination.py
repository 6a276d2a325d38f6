"""A finished container's termination message, as the kubelet reads it for state.terminated.message.

The message is what the container wrote to its terminationMessagePath (the last 4096 bytes of
the file the kubelet mounted there). With terminationMessagePolicy FallbackToLogsOnError, a
container that failed and wrote nothing there gets the tail of its log instead: the last 80
lines, at most the last 2048 bytes.
"""

from __future__ import annotations

import os

from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.runtime import labels

MAX_MESSAGE_BYTES = 4096
MAX_LOG_LINES = 80
MAX_LOG_BYTES = 2048
_LOG_WINDOW = 256 * 1024  # how much of the log's end is read to find its last lines
FALLBACK_TO_LOGS_ON_ERROR = "FallbackToLogsOnError"


def read_tail(path: str, limit: int) -> bytes:
    """The last `limit` bytes of a file."""
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - limit))
        return f.read()


def log_messages(cri_log: bytes) -> list[bytes]:
    """The lines of a CRI-format log (`<time> <stream> <P|F> <text>`), partial lines joined; a
    full line ends with a newline, a last partial one does not."""
    out: list[bytes] = []
    partial = b""
    for raw in cri_log.split(b"\n"):
        fields = raw.split(b" ", 3)
        if len(fields) < 3:
            continue
        text = fields[3] if len(fields) > 3 else b""
        if fields[2] == b"P":
            partial += text
            continue
        out.append(partial + text + b"\n")
        partial = b""
    if partial:  # the output ended without a newline (`echo -n DONE`): its last line as it is
        out.append(partial)
    return out


def log_tail_message(log_path: str) -> str:
    try:
        lines = log_messages(read_tail(log_path, _LOG_WINDOW))
    except OSError:
        return ""
    text = b"".join(lines[-MAX_LOG_LINES:])
    return text[-MAX_LOG_BYTES:].decode(errors="replace")


def termination_message(status: api.ContainerStatus) -> str:
    """The message of an exited container (\"\" for one still running)."""
    if status.state != api.CONTAINER_EXITED:
        return ""
    path = status.annotations.get(labels.TERMINATION_MESSAGE_PATH, "")
    fallback = (status.annotations.get(labels.TERMINATION_MESSAGE_POLICY) == FALLBACK_TO_LOGS_ON_ERROR
                and status.exit_code != 0 and status.reason != "ContainerCannotRun")
    message, check_logs = "", fallback
    for mount in status.mounts if path else ():
        if mount.container_path != path:
            continue
        try:
            data = read_tail(mount.host_path, MAX_MESSAGE_BYTES)
        except FileNotFoundError:
            break
        except OSError as e:
            message, check_logs = f"Error on reading termination log {mount.host_path}: {e}", False
            break
        message, check_logs = data.decode(errors="replace"), fallback and not data
        break
    if check_logs and status.log_path:
        message = log_tail_message(status.log_path)
    return message
