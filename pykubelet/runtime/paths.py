"""Every on-disk path of a pod, in one place: the layout the kubelet uses and tools expect.

    <root-dir>/pods/<uid>/                                 the pod's directory
    <root-dir>/pods/<uid>/volumes/<plugin>/<name>          its volumes (kubernetes.io~empty-dir...)
    <root-dir>/pods/<uid>/volume-subpaths/<volume>/<container>/<index>   subPath bind mounts
    <root-dir>/pods/<uid>/etc-hosts                        its managed /etc/hosts
    <root-dir>/pods/<uid>/containers/<container>/<id>      each instance's termination-message file
    <pod-logs-dir>/<namespace>_<name>_<uid>/<container>/<restartCount>.log   container logs
"""

from __future__ import annotations

import os

PODS = "pods"
VOLUMES = "volumes"


def pods_dir(root_dir: str) -> str:
    return os.path.join(root_dir, PODS)


def pod_dir(root_dir: str, uid: str) -> str:
    return os.path.join(root_dir, PODS, uid)


def volumes_dir(root_dir: str, uid: str) -> str:
    return os.path.join(pod_dir(root_dir, uid), VOLUMES)


def volume_dir(root_dir: str, uid: str, plugin: str, name: str) -> str:
    """One volume's directory; `plugin` is the kubelet's plugin directory (kubernetes.io~configmap...)."""
    return os.path.join(volumes_dir(root_dir, uid), plugin, name)


def volume_subpaths_dir(root_dir: str, uid: str) -> str:
    return os.path.join(pod_dir(root_dir, uid), "volume-subpaths")


def volume_subpath(root_dir: str, uid: str, volume: str, container: str, index: int) -> str:
    """Where a subPath is bind-mounted for the runtime; `index`: the volumeMount's position in
    the container's volumeMounts."""
    return os.path.join(volume_subpaths_dir(root_dir, uid), volume, container, str(index))


def etc_hosts(root_dir: str, uid: str) -> str:
    return os.path.join(pod_dir(root_dir, uid), "etc-hosts")


def termination_message_dir(root_dir: str, uid: str, container: str) -> str:
    return os.path.join(pod_dir(root_dir, uid), "containers", container)


def pod_log_dir_name(namespace: str, name: str, uid: str) -> str:
    """<namespace>_<name>_<uid>: a pod's directory in the pod logs dir, the layout log collectors expect."""
    return f"{namespace}_{name}_{uid}"


def pod_log_dir(logs_root: str, namespace: str, name: str, uid: str) -> str:
    return os.path.join(logs_root, pod_log_dir_name(namespace, name, uid))


def container_log_path(container_name: str, restart_count: int) -> str:
    """Relative to the pod's log directory: <container>/<restartCount>.log."""
    return os.path.join(container_name, f"{restart_count}.log")
