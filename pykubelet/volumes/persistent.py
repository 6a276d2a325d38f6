"""Setting up the PVs a node handles itself, as the kubelet's hostPath and local plugins do.

- hostPath PV: nothing is mounted and no fsGroup is applied; the path is checked against its
  type, exactly as a pod's own hostPath volume (local.py), and handed to the runtime as it is.
- local PV (a directory): bind-mounted (read-only when the pod's claim says so, with the PV's
  mountOptions) onto

      <root-dir>/pods/<uid>/volumes/kubernetes.io~local-volume/<pv>

  so that every pod has its own mount, torn down with the pod (local.teardown_volumes). The
  fsGroup is applied once, by the first pod to mount it, and never to a read-only mount.

Blocking throughout: run in a thread.
"""

from __future__ import annotations

import os
import subprocess

from pykubelet.runtime import data_dirs, paths
from pykubelet.util import safe_remove
from pykubelet.util.mounts import is_mount_point, mount_points
from pykubelet.volumes.claim_model import PersistentVolume
from pykubelet.volumes.local import VolumeSetupError, set_up_host_path
from pykubelet.volumes.ownership import change_ownership

LOCAL_PLUGIN_DIR = "kubernetes.io~local-volume"


def local_volume_path(root_dir: str, uid: str, pv_name: str) -> str:
    return paths.volume_dir(root_dir, uid, LOCAL_PLUGIN_DIR, pv_name)


def mounted_by_other_pods(root_dir: str, uid: str, pv_name: str) -> list[str]:
    """The other pods' mounts of this local PV (the kubelet's mount references of it)."""
    pods = os.path.realpath(paths.pods_dir(root_dir))
    tail = os.path.join("volumes", LOCAL_PLUGIN_DIR, pv_name)
    return sorted(m for m in mount_points() if m.startswith(pods + "/") and m.endswith("/" + tail)
                  and os.path.relpath(m, pods).split("/")[0] != uid)


def _mount(args: list[str]) -> None:
    done = subprocess.run(["mount", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise VolumeSetupError(f"mount failed: {done.stderr.strip() or done.returncode}")


def set_up_local(root_dir: str, uid: str, pv: PersistentVolume, read_only: bool, fs_group: int | None,
                 fs_group_change_policy: str) -> str:
    """The pod's bind mount of the local PV (made once, idempotent); VolumeSetupError in the
    kubelet's words."""
    source = pv.source.get("path") or ""
    if not source:
        raise VolumeSetupError(f'LocalVolume volume "{pv.name}" path is empty')
    if ".." in source.split("/"):
        raise VolumeSetupError(f"invalid path: {source} must not contain '..'")
    try:
        safe_remove.check_plain_name(pv.name)  # it names a directory of the pod's
    except safe_remove.UnsafeName as e:
        raise VolumeSetupError(f"PersistentVolume name: {e}") from None
    target = local_volume_path(root_dir, uid, pv.name)
    if is_mount_point(target):
        return target
    others = mounted_by_other_pods(root_dir, uid, pv.name)
    data_dirs.ensure_pod_dirs(root_dir, uid)
    data_dirs.make_dir(os.path.dirname(target))
    os.makedirs(target, mode=0o750, exist_ok=True)
    try:
        _mount(["--bind", source, target])
        extra = (["ro"] if read_only else []) + list(pv.mount_options)
        if extra:  # a bind takes its flags only from a remount
            _mount(["-o", ",".join(["remount", "bind", *extra]), target])
    except VolumeSetupError:
        if is_mount_point(target):
            subprocess.run(["umount", target], capture_output=True)
        if not is_mount_point(target):
            os.rmdir(target)
        raise
    if not read_only and not others:
        change_ownership(target, fs_group, fs_group_change_policy, read_only)
    return target


def set_up(root_dir: str, uid: str, pv: PersistentVolume, read_only: bool, fs_group: int | None,
           fs_group_change_policy: str) -> str:
    """The host path the containers get for the PV, set up."""
    if pv.source_kind == "hostPath":
        return set_up_host_path(pv.source)
    return set_up_local(root_dir, uid, pv, read_only, fs_group, fs_group_change_policy)


def tear_down_local(root_dir: str, uid: str, pv_name: str) -> None:
    """Unmount the pod's bind of the local PV (its directory goes with the pod's)."""
    target = local_volume_path(root_dir, uid, pv_name)
    if is_mount_point(target):
        subprocess.run(["umount", target], capture_output=True)
