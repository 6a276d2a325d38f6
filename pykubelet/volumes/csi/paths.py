"""Where a CSI volume lives on the node, with the kubelet's exact names (pure).

The same directory names and files as the kubelet's CSI plugin, so a node handed from one agent
to the other (or an agent restarted) finds its staged and published volumes again:

- staging (NodeStageVolume's target): <root>/plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/globalmount,
  with vol_data.json beside it;
- publishing (NodePublishVolume's target): <root>/pods/<uid>/volumes/kubernetes.io~csi/<name>/mount,
  with vol_data.json beside it; <name> is the PV's name, or the pod volume's for an inline volume.

A block volume (volumeMode Block, a PV) has its own tree under <root>/plugins/kubernetes.io/csi/volumeDevices:
staging/<pv> (NodeStageVolume's target), publish/<pv>/<uid> (NodePublishVolume's: a file the
driver makes the device), <pv>/data/vol_data.json; the pod's <root>/pods/<uid>/volumeDevices/kubernetes.io~csi/<pv>
is a symbolic link to its publish path, the device its containers get.
"""

from __future__ import annotations

import hashlib
import os

from pykubelet.runtime import paths as pod_paths
from pykubelet.util.safe_remove import UnsafeName, check_plain_name

PLUGIN_NAME = "kubernetes.io/csi"
ESCAPED_PLUGIN_NAME = "kubernetes.io~csi"
"""The plugin name as a directory under a pod's volumes/ ('/' would nest it)."""
VOL_DATA_FILE = "vol_data.json"
GLOBAL_MOUNT_DIR = "globalmount"
PUBLISH_DIR = "mount"


class CsiPathError(ValueError):
    """A driver, volume or pod name that cannot be one directory name."""


def _plain(name: str, what: str) -> str:
    # Names come from API objects any user with PV or pod rights writes; each must stay one
    # directory under the agent's root, never climb out of it.
    try:
        check_plain_name(name)
    except UnsafeName:
        raise CsiPathError(f"{what} {name!r} cannot be used as a directory name") from None
    return name


def _sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def plugin_dir(root_dir: str) -> str:
    return os.path.join(root_dir, "plugins", PLUGIN_NAME)


def global_mount_path(root_dir: str, driver: str, volume_handle: str) -> str:
    """NodeStageVolume's staging_target_path: one per (driver, volume), shared by all pods."""
    if not volume_handle:
        raise CsiPathError("the CSI volume handle is empty")
    return os.path.join(plugin_dir(root_dir), _plain(driver, "CSI driver name"), _sha256_hex(volume_handle),
                        GLOBAL_MOUNT_DIR)


def pod_volume_dir(root_dir: str, pod_uid: str, spec_name: str) -> str:
    """The directory holding one pod's published volume (mount/) and its vol_data.json."""
    return pod_paths.volume_dir(root_dir, _plain(pod_uid, "pod UID"), ESCAPED_PLUGIN_NAME,
                                _plain(spec_name, "volume name"))


def publish_target_path(root_dir: str, pod_uid: str, spec_name: str) -> str:
    """NodePublishVolume's target_path, the directory the containers' bind mounts take."""
    return os.path.join(pod_volume_dir(root_dir, pod_uid, spec_name), PUBLISH_DIR)


def attachment_name(volume_handle: str, driver: str, node_name: str) -> str:
    """The VolumeAttachment object the attach/detach controller makes for the volume on this node."""
    return "csi-" + _sha256_hex(f"{volume_handle}{driver}{node_name}")


def inline_volume_handle(pod_uid: str, volume_name: str) -> str:
    """The volume_id an inline (ephemeral) CSI volume is published with: unique per pod and volume."""
    return "csi-" + _sha256_hex(f"{pod_uid}{volume_name}")


def volume_devices_dir(root_dir: str) -> str:
    return os.path.join(plugin_dir(root_dir), "volumeDevices")


def block_staging_path(root_dir: str, spec_name: str) -> str:
    """A block volume's NodeStageVolume target: one per PV, shared by the node's pods."""
    return os.path.join(volume_devices_dir(root_dir), "staging", _plain(spec_name, "volume name"))


def block_publish_path(root_dir: str, spec_name: str, pod_uid: str) -> str:
    """A block volume's NodePublishVolume target for one pod."""
    return os.path.join(volume_devices_dir(root_dir), "publish", _plain(spec_name, "volume name"),
                        _plain(pod_uid, "pod UID"))


def block_data_dir(root_dir: str, spec_name: str) -> str:
    """Where a block volume's vol_data.json is kept."""
    return os.path.join(volume_devices_dir(root_dir), _plain(spec_name, "volume name"), "data")


def pod_device_map_path(root_dir: str, pod_uid: str, spec_name: str) -> str:
    """The pod's symbolic link to the block volume's publish path: what its containers get as a device."""
    return os.path.join(pod_paths.pod_dir(root_dir, _plain(pod_uid, "pod UID")), "volumeDevices", ESCAPED_PLUGIN_NAME,
                        _plain(spec_name, "volume name"))
