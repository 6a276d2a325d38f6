"""The kubelet's AtomicWriter layout on a temporary directory: ..data swap, key links, removal."""

from __future__ import annotations

import os
import pathlib

import pytest

from pykubelet.volumes.atomic_writer import DATA_DIR, FileProjection, PayloadError, write_atomic


def visible(target: pathlib.Path) -> dict[str, str]:
    """What a container sees: every non-hidden entry, read through the links."""
    out = {}
    for root, _, files in os.walk(target, followlinks=True):
        rel_root = os.path.relpath(root, target)
        if rel_root.split("/")[0].startswith(".."):
            continue
        for name in files:
            path = os.path.normpath(os.path.join(rel_root, name))
            out[path] = (target / path).read_text()
    for entry in target.iterdir():
        if not entry.name.startswith("..") and entry.is_file():
            out[entry.name] = entry.read_text()
    return out


def test_first_write_lays_out_the_timestamped_dir_data_link_and_key_links(tmp_path):
    target = tmp_path / "vol"
    assert write_atomic(str(target), {"a": FileProjection(b"1"), "dir/b": FileProjection(b"2", 0o600)})
    data = os.readlink(target / DATA_DIR)
    assert data.startswith("..") and (target / data).is_dir()
    assert os.readlink(target / "a") == "..data/a"
    assert os.readlink(target / "dir") == "..data/dir"
    assert (target / "a").read_text() == "1" and (target / "dir" / "b").read_text() == "2"
    assert (target / data / "dir" / "b").stat().st_mode & 0o777 == 0o600
    assert (target / data / "a").stat().st_mode & 0o777 == 0o644


def test_an_unchanged_payload_writes_nothing(tmp_path):
    target = tmp_path / "vol"
    write_atomic(str(target), {"a": FileProjection(b"1")})
    before = os.readlink(target / DATA_DIR)
    assert not write_atomic(str(target), {"a": FileProjection(b"1")})
    assert os.readlink(target / DATA_DIR) == before


def test_a_mode_change_alone_is_written(tmp_path):
    target = tmp_path / "vol"
    write_atomic(str(target), {"a": FileProjection(b"1")})
    assert write_atomic(str(target), {"a": FileProjection(b"1", 0o400)})
    assert (target / "a").stat().st_mode & 0o777 == 0o400


def test_an_update_swaps_the_data_link_and_removes_the_old_dir_and_gone_keys(tmp_path):
    target = tmp_path / "vol"
    write_atomic(str(target), {"a": FileProjection(b"1"), "b": FileProjection(b"2")})
    old = os.readlink(target / DATA_DIR)
    assert write_atomic(str(target), {"a": FileProjection(b"changed"), "c": FileProjection(b"3")})
    new = os.readlink(target / DATA_DIR)
    assert new != old and not (target / old).exists()
    assert visible(target) == {"a": "changed", "c": "3"}
    assert not os.path.lexists(target / "b")
    hidden = sorted(p.name for p in target.iterdir() if p.name.startswith(".."))
    assert hidden == sorted([DATA_DIR, new])  # no ..data_tmp or stale timestamped dirs left


def test_an_empty_payload_leaves_only_the_data_link(tmp_path):
    target = tmp_path / "vol"
    write_atomic(str(target), {"a": FileProjection(b"1")})
    write_atomic(str(target), {})
    assert visible(target) == {}
    assert os.path.islink(target / DATA_DIR)


@pytest.mark.parametrize("path", ["/etc/passwd", "../x", "a/../../x", "..hidden", ""])
def test_paths_that_escape_or_hide_are_refused(tmp_path, path):
    with pytest.raises(PayloadError):
        write_atomic(str(tmp_path / "vol"), {path: FileProjection(b"x")})


def test_an_fs_group_owns_the_files_and_can_read_them(tmp_path):
    target = tmp_path / "vol"
    write_atomic(str(target), {"key": FileProjection(b"1", 0o400), "d/x": FileProjection(b"2", 0o600)}, fs_group=2000)
    data = target / os.readlink(target / DATA_DIR)
    assert (data / "key").stat().st_gid == 2000 and (data / "key").stat().st_mode & 0o777 == 0o440
    assert (data / "d" / "x").stat().st_mode & 0o777 == 0o640
    assert (data / "d").stat().st_gid == 2000 and (data / "d").stat().st_mode & 0o2000
    assert not write_atomic(str(target), {"key": FileProjection(b"1", 0o400), "d/x": FileProjection(b"2", 0o600)},
                            fs_group=2000)
