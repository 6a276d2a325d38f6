"""The fsGroup ownership step on a volume: group and group bits on everything, setgid on
directories, skipped under OnRootMismatch when the root is already done, and never through a
symlink the pod planted. chown needs root."""

from __future__ import annotations

import os
import stat

import pytest

from pykubelet.volumes.ownership import change_ownership

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another group needs root")
GID = 4321


def tree(tmp_path):
    volume = tmp_path / "volume"
    (volume / "sub").mkdir(parents=True)
    (volume / "sub" / "file").write_text("x")
    (volume / "top").write_text("y")
    os.chmod(volume / "top", 0o600)
    outside = tmp_path / "outside"
    outside.write_text("host")
    os.chmod(outside, 0o600)
    (volume / "link").symlink_to(outside)
    return volume, outside


def test_every_entry_gets_the_group_and_its_bits_and_a_link_out_changes_nothing_outside(tmp_path):
    volume, outside = tree(tmp_path)
    assert change_ownership(str(volume), GID, "", read_only=False) == 5
    for path in (volume, volume / "sub", volume / "sub" / "file", volume / "top"):
        info = os.stat(path)
        assert info.st_gid == GID, path
    assert stat.S_IMODE(os.stat(volume / "top").st_mode) == 0o660
    for directory in (volume, volume / "sub"):
        mode = os.stat(directory).st_mode
        assert mode & stat.S_ISGID and mode & 0o770 == 0o770
    assert os.lstat(volume / "link").st_gid == GID  # the link itself, as lchown does
    assert os.stat(outside).st_gid != GID and stat.S_IMODE(os.stat(outside).st_mode) == 0o600


def test_on_root_mismatch_skips_a_volume_whose_root_is_done_and_always_walks_it_again(tmp_path):
    volume, _ = tree(tmp_path)
    change_ownership(str(volume), GID, "OnRootMismatch", read_only=False)
    os.chown(volume / "top", -1, 0)  # something changed below the root afterwards
    assert change_ownership(str(volume), GID, "OnRootMismatch", read_only=False) == 0
    assert os.stat(volume / "top").st_gid == 0
    assert change_ownership(str(volume), GID, "Always", read_only=False) == 5
    assert os.stat(volume / "top").st_gid == GID


def test_no_fs_group_changes_nothing(tmp_path):
    volume, _ = tree(tmp_path)
    assert change_ownership(str(volume), None, "", read_only=False) == 0
    assert os.stat(volume / "top").st_gid != GID
