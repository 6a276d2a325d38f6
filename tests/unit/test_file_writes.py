"""Files the agent writes: secrets never readable beyond their mode, even for a moment; a full
disk leaves nothing half-written; credentials are synced before they replace the old ones."""

from __future__ import annotations

import errno
import os

import pytest

from pykubelet.kube.certstore import CertStore
from pykubelet.util import durable
from pykubelet.volumes import atomic_writer
from pykubelet.volumes.atomic_writer import DATA_DIR, FileProjection, write_atomic
from tests.unit.test_tls_bootstrap import CA


@pytest.fixture
def open_umask():
    old = os.umask(0)
    yield
    os.umask(old)


def record_modes_at_write(monkeypatch, module) -> list[int]:
    """The mode each file has when its first byte is written through module's os.write."""
    modes: list[int] = []
    real_write = os.write

    def write(fd, data):
        modes.append(os.fstat(fd).st_mode & 0o7777)
        return real_write(fd, data)
    monkeypatch.setattr(module.os, "write", write)
    return modes


def test_secret_files_have_their_final_mode_before_any_byte_is_written(tmp_path, monkeypatch, open_umask):
    modes = record_modes_at_write(monkeypatch, atomic_writer)
    write_atomic(str(tmp_path / "vol"), {"token": FileProjection(b"secret", 0o600), "ca.crt": FileProjection(b"c", 0o640)})
    assert sorted(modes) == [0o600, 0o640]
    data = tmp_path / "vol" / os.readlink(tmp_path / "vol" / DATA_DIR)
    assert (os.stat(data / "token").st_mode & 0o7777, os.stat(data / "ca.crt").st_mode & 0o7777) == (0o600, 0o640)


def test_a_mode_with_setuid_bits_is_written_without_them(tmp_path):
    write_atomic(str(tmp_path / "vol"), {"x": FileProjection(b"#!/bin/sh\n", 0o4755)})
    assert os.stat(tmp_path / "vol" / "x").st_mode & 0o7777 == 0o755


def test_a_full_disk_leaves_the_volume_as_it_was(tmp_path, monkeypatch):
    target = tmp_path / "vol"
    write_atomic(str(target), {"a": FileProjection(b"old")})
    before = sorted(os.listdir(target))
    real_write, calls = os.write, []

    def write(fd, data):
        calls.append(fd)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)
    monkeypatch.setattr(atomic_writer.os, "write", write)
    with pytest.raises(OSError, match="No space left"):
        write_atomic(str(target), {"a": FileProjection(b"new"), "b/c": FileProjection(b"new")})
    assert sorted(os.listdir(target)) == before, "no half-written timestamped directory, no ..data_tmp"
    assert (target / "a").read_text() == "old"


def test_a_durable_write_is_synced_has_its_mode_from_the_start_and_replaces_atomically(tmp_path, monkeypatch,
                                                                                        open_umask):
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(durable.os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    modes = record_modes_at_write(monkeypatch, durable)
    path = tmp_path / "kubeconfig"
    path.write_text("old")
    durable.write_file(str(path), b"new", 0o600)
    assert path.read_text() == "new" and os.stat(path).st_mode & 0o777 == 0o600
    assert modes == [0o600] and len(synced) == 2, "the file, then its directory"
    assert os.listdir(tmp_path) == ["kubeconfig"]


def test_a_failed_durable_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "cert.pem"
    path.write_text("old")
    monkeypatch.setattr(durable.os, "write", lambda fd, data: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full")))
    with pytest.raises(OSError):
        durable.write_file(str(path), b"new", 0o600)
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["cert.pem"]


def test_the_cert_store_syncs_the_new_pair_before_pointing_current_at_it(tmp_path, monkeypatch):
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(durable.os, "fsync", lambda fd: (events.append("fsync"), real_fsync(fd)))
    monkeypatch.setattr(durable.os, "replace", lambda a, b: (events.append(f"replace {os.path.basename(b)}"),
                                                             real_replace(a, b)))
    store = CertStore(str(tmp_path / "pki"))
    path = store.save(*CA().node_pair())
    assert os.stat(path).st_mode & 0o777 == 0o600
    current = os.path.basename(store.current_path)
    assert events == ["fsync", f"replace {os.path.basename(path)}", "fsync", f"replace {current}", "fsync"]
