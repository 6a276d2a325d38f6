"""The agent's directories on the host, made with the kubelet's modes and removed safely.

    <root-dir>               0750 when the agent makes it (an existing one is left as it is)
    <root-dir>/pods          0750, always: pod data (secrets, configMaps) is for root only
    <root-dir>/pods/<uid>    0750, and its volumes/ and containers/<name>/ below
    <pod-logs-dir>           0750 when the agent makes it

Local users other than root thus cannot look into any pod's files; containers still reach their
own volumes, which the runtime bind-mounts as root. Paths themselves: runtime/paths.py.
"""

from __future__ import annotations

import os
import stat

from pykubelet.runtime import paths
from pykubelet.util import safe_remove

DIR_MODE = 0o750


def make_dir(path: str, mode: int = DIR_MODE) -> None:
    """Make `path` and its missing parents with `mode` (Go's MkdirAll); existing ones stay as they are."""
    parent = os.path.dirname(path.rstrip("/"))
    if parent and parent != path and not os.path.isdir(parent):
        make_dir(parent, mode)
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        return


def _restrict(path: str, mode: int) -> None:
    """Take away any permission beyond `mode` (a directory an older agent made 0755)."""
    current = stat.S_IMODE(os.stat(path).st_mode)
    if current & ~mode:
        os.chmod(path, current & mode)


def setup_data_dirs(root_dir: str, pod_logs_dir: str) -> None:
    """At start, as the kubelet's setupDataDirs: the root dir, pods/ and the pod logs root."""
    make_dir(root_dir)
    make_dir(paths.pods_dir(root_dir))
    _restrict(paths.pods_dir(root_dir), DIR_MODE)
    make_dir(pod_logs_dir)


def ensure_pod_dirs(root_dir: str, uid: str) -> None:
    """pods/<uid> and pods/<uid>/volumes, 0750 (the kubelet's makePodDataDirs); before anything
    of the pod is written, so nothing below is made with a wider mode on the way."""
    safe_remove.check_plain_name(uid)
    make_dir(paths.pods_dir(root_dir))
    make_dir(paths.pod_dir(root_dir, uid))
    make_dir(paths.volumes_dir(root_dir, uid))


def remove_pod_log_dir(pod_logs_dir: str, namespace: str, name: str, uid: str) -> bool:
    """Remove <pod-logs-dir>/<namespace>_<name>_<uid>; never anything outside that one directory."""
    return safe_remove.remove_child_dir(pod_logs_dir, paths.pod_log_dir_name(namespace, name, uid))


def remove_orphaned_pod_log_dirs(pod_logs_dir: str, keep: set[str]) -> list[str]:
    """Remove the <namespace>_<name>_<uid> directories of pods nothing knows any more (the
    kubelet's container GC does the same): a pod whose cleanup was cut short (the agent killed
    after the pod's final status, before its files went) leaves one. The UIDs whose directory went.
    Entries that are not a pod's log directory are left alone."""
    try:
        entries = os.listdir(pod_logs_dir)
    except FileNotFoundError:
        return []
    removed = []
    for entry in entries:
        parts = entry.split("_")  # namespaces, names and UIDs never hold "_"
        if len(parts) == 3 and all(parts) and parts[2] not in keep:
            try:
                if safe_remove.remove_child_dir(pod_logs_dir, entry):
                    removed.append(parts[2])
            except safe_remove.UnsafeName:
                continue
    return removed
