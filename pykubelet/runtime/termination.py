"""A finished container's termination message, as the kubelet reads it for state.terminated.message.

The message is what the container wrote to its terminationMessagePath: the last 4096 bytes of
the file the agent made for that container instance and mounted there (runtime/podfiles.py).
With terminationMessagePolicy FallbackToLogsOnError, a container that failed and wrote nothing
there gets the tail of its log instead: the last 80 lines, at most the last 2048 bytes.

A pod controls what else is mounted at that path (a FIFO through a subPath, a symlink), so only
the agent's own file is read: found by its place under the pod's directory, opened without
following links and without blocking, read only if it is a regular file. The PLEG calls this in
a worker thread, never on the event loop.
"""

from __future__ import annotations

import os
import re

from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.runtime import labels, paths
from pykubelet.util import nofollow

MAX_MESSAGE_BYTES = 4096
MAX_LOG_LINES = 80
MAX_LOG_BYTES = 2048
_LOG_WINDOW = 256 * 1024  # how much of the log's end is read to find its last lines
FALLBACK_TO_LOGS_ON_ERROR = "FallbackToLogsOnError"
_INSTANCE_FILE = re.compile(r"^[0-9a-f]{8}$")  # the name podfiles gives each instance's file


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
        fd = nofollow.open_file(log_path)
        try:
            lines = log_messages(nofollow.read_tail(fd, _LOG_WINDOW))
        finally:
            os.close(fd)
    except OSError:
        return ""
    text = b"".join(lines[-MAX_LOG_LINES:])
    return text[-MAX_LOG_BYTES:].decode(errors="replace")


def own_message_file(status: api.ContainerStatus, root_dir: str, uid: str) -> str | None:
    """The host path of the file the agent mounted at the container's terminationMessagePath
    (pods/<uid>/containers/<name>/<8 hex digits>), None if no mount there is the agent's."""
    path = status.annotations.get(labels.TERMINATION_MESSAGE_PATH, "")
    directory = paths.termination_message_dir(root_dir, uid, status.metadata.name)
    for mount in status.mounts if path else ():
        if mount.container_path == path and os.path.dirname(mount.host_path) == directory \
                and _INSTANCE_FILE.match(os.path.basename(mount.host_path)):
            return mount.host_path
    return None


def _read_own_file(root_dir: str, uid: str, container: str, host_path: str) -> bytes:
    fd = nofollow.open_beneath(paths.pods_dir(root_dir),
                               (uid, "containers", container, os.path.basename(host_path)))
    try:
        return nofollow.read_tail(fd, MAX_MESSAGE_BYTES)
    finally:
        os.close(fd)


def termination_message(status: api.ContainerStatus, root_dir: str, uid: str) -> str:
    """The message of an exited container ("" for one still running); blocking file I/O."""
    if status.state != api.CONTAINER_EXITED:
        return ""
    fallback = (status.annotations.get(labels.TERMINATION_MESSAGE_POLICY) == FALLBACK_TO_LOGS_ON_ERROR
                and status.exit_code != 0 and status.reason != "ContainerCannotRun")
    message, check_logs = "", fallback
    host_path = own_message_file(status, root_dir, uid)
    if host_path is not None:
        try:
            data = _read_own_file(root_dir, uid, status.metadata.name, host_path)
            message, check_logs = data.decode(errors="replace"), fallback and not data
        except FileNotFoundError:
            pass
        except OSError as e:
            message, check_logs = f"Error on reading termination log {host_path}: {e}", False
    if check_logs and status.log_path:
        message = log_tail_message(status.log_path)
    return message
