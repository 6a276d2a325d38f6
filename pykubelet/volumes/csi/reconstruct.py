"""What earlier runs of the agent left published and staged, read back from the disk (blocking:
call scan() off the event loop).

The kubelet's volume reconstruction, for its CSI plugin: every pod directory's
volumes/kubernetes.io~csi/<name> (its vol_data.json names the driver, the volume ID and whether
it is an inline volume) and volumeDevices/kubernetes.io~csi/<pv> (a block PV, whose data is kept
in the plugin's volumeDevices/<pv>/data). Beyond the kubelet, the block publish paths
(volumeDevices/publish/<pv>/<uid>) count too, since a pod's link to its device goes before the
driver is asked to unpublish; and the stagings themselves (globalmount with its vol_data.json,
volumeDevices/staging/<pv>), so a staging whose pods are all gone is still unstaged.

An entry that cannot be read is reported, not guessed at: nothing is unpublished for it (and
the pod directory holding a mount is never removed).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from pykubelet.runtime import paths as pod_paths
from pykubelet.volumes.csi import paths, vol_data


@dataclass(frozen=True)
class FoundVolume:
    """A volume an earlier agent published for a pod."""

    pod_uid: str
    spec_name: str
    """The directory's name: the PV's, or the pod volume's for an inline volume."""
    driver: str
    volume_handle: str
    inline: bool = False
    block: bool = False


@dataclass(frozen=True)
class FoundStaging:
    driver: str
    volume_handle: str
    path: str
    block_pv: str = ""
    """For a block volume's staging: its PV's name (how its files are named)."""


@dataclass(frozen=True)
class FoundOnDisk:
    volumes: tuple[FoundVolume, ...] = ()
    stagings: tuple[FoundStaging, ...] = ()
    problems: tuple[str, ...] = ()
    """What could not be read, each naming its path."""


def _entries(directory: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as it:
            return sorted(it, key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return []


def _subdirs(directory: str) -> list[str]:
    return [e.name for e in _entries(directory) if e.is_dir(follow_symlinks=False)]


class _Scan:
    def __init__(self, root_dir: str):
        self.root_dir = root_dir
        self.volumes: dict[tuple[str, str, bool], FoundVolume] = {}
        self.stagings: list[FoundStaging] = []
        self.problems: list[str] = []

    def _load(self, directory: str) -> tuple[str, str, dict[str, str]] | None:
        """(driver, volume handle, all) of directory/vol_data.json; None (a problem) when unusable."""
        try:
            data = vol_data.load(directory)
        except (OSError, vol_data.VolDataError) as e:
            self.problems.append(str(e))
            return None
        if data is None:
            self.problems.append(f"no {paths.VOL_DATA_FILE} in {directory}")
            return None
        driver, handle = data.get(vol_data.DRIVER_NAME, ""), data.get(vol_data.VOLUME_HANDLE, "")
        if not driver or not handle:
            self.problems.append(f"{os.path.join(directory, paths.VOL_DATA_FILE)}: no driver name or volume handle")
            return None
        return driver, handle, data

    def pod_volumes(self, uid: str) -> None:
        plugin = os.path.join(pod_paths.volumes_dir(self.root_dir, uid), paths.ESCAPED_PLUGIN_NAME)
        for name in _subdirs(plugin):
            found = self._load(os.path.join(plugin, name))
            if found is not None:
                inline = found[2].get(vol_data.LIFECYCLE_MODE) == vol_data.EPHEMERAL
                self.volumes[(uid, name, False)] = FoundVolume(uid, name, found[0], found[1], inline)
        devices = os.path.join(pod_paths.pod_dir(self.root_dir, uid), "volumeDevices", paths.ESCAPED_PLUGIN_NAME)
        for entry in _entries(devices):
            self.block_volume(uid, entry.name)

    def block_volume(self, uid: str, pv_name: str) -> None:
        if (uid, pv_name, True) in self.volumes:
            return
        try:
            found = self._load(paths.block_data_dir(self.root_dir, pv_name))
        except paths.CsiPathError as e:
            self.problems.append(str(e))
            return
        if found is not None:
            self.volumes[(uid, pv_name, True)] = FoundVolume(uid, pv_name, found[0], found[1], block=True)

    def filesystem_stagings(self) -> None:
        plugin = paths.plugin_dir(self.root_dir)
        for driver in _subdirs(plugin):
            if driver == os.path.basename(paths.volume_devices_dir(self.root_dir)):
                continue
            for volume in _subdirs(os.path.join(plugin, driver)):
                directory = os.path.join(plugin, driver, volume)
                if not os.path.exists(os.path.join(directory, paths.VOL_DATA_FILE)):
                    continue  # nothing recorded: nothing staged (the kubelet's UnmountDevice skips it too)
                found = self._load(directory)
                if found is not None:
                    self.stagings.append(FoundStaging(found[0], found[1],
                                                      os.path.join(directory, paths.GLOBAL_MOUNT_DIR)))

    def block_publishes_and_stagings(self) -> None:
        devices = paths.volume_devices_dir(self.root_dir)
        for pv_name in _subdirs(os.path.join(devices, "publish")):
            for entry in _entries(os.path.join(devices, "publish", pv_name)):
                self.block_volume(entry.name, pv_name)
        for pv_name in _subdirs(os.path.join(devices, "staging")):
            found = self._load(paths.block_data_dir(self.root_dir, pv_name))
            if found is not None:
                self.stagings.append(FoundStaging(found[0], found[1], os.path.join(devices, "staging", pv_name),
                                                  pv_name))


def scan(root_dir: str) -> FoundOnDisk:
    """Everything CSI the agent's root directory holds (blocking)."""
    found = _Scan(root_dir)
    for uid in _subdirs(pod_paths.pods_dir(root_dir)):
        found.pod_volumes(uid)
    found.block_publishes_and_stagings()
    found.filesystem_stagings()
    return FoundOnDisk(tuple(found.volumes.values()), tuple(found.stagings), tuple(found.problems))
