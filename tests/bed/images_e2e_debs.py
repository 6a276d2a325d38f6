"""Debian 12 packages as image layers, for the test bed's image builders (tests/bed/images_e2e.py,
images_e2e_cluster.py, images_addons.py).

Packages are fetched with apt into a cache directory (apt resolves their dependencies against an
empty package database, so nothing is installed on this machine) and unpacked into a layer
without their maintainer scripts; documentation is left out, as Debian's own container base
images do.
"""
from __future__ import annotations

import functools
import io
import re
import subprocess
import sys
import tarfile
from pathlib import Path

from images import Entry  # tests/bed/images.py (the caller puts tests/bed on sys.path)

# Where Debian's container base images drop files no program reads (dpkg path-exclude).
EXCLUDED = ("usr/share/doc/", "usr/share/man/", "usr/share/info/", "usr/share/locale/", "usr/share/lintian/")
# What Debian's slim container bases hold that the test images' programs need (their "required"
# set would also bring apt, dpkg, login and more that no spec runs).
# libc-bin (getent, which the DNS specs' probes run) is in every Debian image: it is Essential
DEBIAN_BASE = ["base-files", "base-passwd", "bash", "coreutils", "dash", "grep", "sed", "findutils", "hostname",
               "libc-bin"]
# Inst NAME (VERSION RELEASE [ARCH]) [what it breaks, if anything]
INST = re.compile(r"^Inst (?P<name>\S+) \((?P<version>\S+) .*\[(?P<arch>[a-z0-9]+)\]\)")


def log(msg: str) -> None:
    print(f"images_e2e.py: {msg}", file=sys.stderr, flush=True)


def fetch_debs(packages: list[str], debs: Path) -> list[Path]:
    """The .debs of `packages` and everything they depend on (no recommends), from the cache `debs`
    or apt."""
    return list(_fetch_debs(tuple(packages), debs))


# Once per run for each package list: several images are built on the same packages (agnhost and
# the images FROM it), and apt's dry run takes seconds.
@functools.cache
def _fetch_debs(packages: tuple[str, ...], debs: Path) -> tuple[Path, ...]:
    """apt resolves against an empty status file, so it neither sees nor touches this machine's
    installed packages; NoLocking because nothing of the machine's dpkg state is written."""
    debs.mkdir(parents=True, exist_ok=True)
    (debs / "partial").mkdir(exist_ok=True)
    status = debs / ".empty-status"
    status.touch()
    apt = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "-o", "Debug::NoLocking=1",
           "-o", f"Dir::State::status={status}", "-o", f"Dir::Cache::archives={debs}"]
    names = _closure(apt, list(packages))
    if names is None:  # stale package lists (a version left the mirror): refresh them once
        log("apt cannot resolve the packages with the current lists; running apt-get update")
        subprocess.run(["apt-get", "update", "-q"], check=True, capture_output=True)
        names = _closure(apt, list(packages))
    if names is None:
        raise SystemExit(f"images_e2e.py: apt cannot resolve {packages}")
    if any(not (debs / name).is_file() for name in names):
        log(f"downloading Debian packages into {debs}: {' '.join(packages)} and their dependencies")
        r = subprocess.run([*apt, "--download-only", *packages], capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"images_e2e.py: apt-get download failed:\n{r.stderr.strip()}")
    return tuple(debs / name for name in sorted(names))


def _closure(apt: list[str], packages: list[str]) -> list[str] | None:
    """The .deb file names of every package apt would install (a dry run); None if it cannot."""
    r = subprocess.run([*apt, "--simulate", *packages], capture_output=True, text=True)
    if r.returncode != 0:
        return None
    names = []
    for line in r.stdout.splitlines():
        if m := INST.match(line):
            names.append(f"{m['name']}_{m['version'].replace(':', '%3a')}_{m['arch']}.deb")
    return names


def deb_entries(debs: list[Path]) -> tuple[list[Entry], list[str]]:
    """The files of the packages (later packages win a path), and "name=version" of each."""
    by_path: dict[str, Entry] = {}
    versions = []
    for deb in debs:
        fields = subprocess.run(["dpkg-deb", "-f", str(deb), "Package", "Version"], capture_output=True,
                                text=True, check=True).stdout
        info = dict(line.split(": ", 1) for line in fields.splitlines() if ": " in line)
        versions.append(f"{info['Package']}={info['Version']}")
        data = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True).stdout
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            contents: dict[str, bytes] = {}
            for member in tar:
                path = member.name.removeprefix("./").rstrip("/")
                if not path or path.startswith(EXCLUDED):
                    continue
                if member.isdir():
                    by_path[path] = Entry(path, "dir", member.mode)
                elif member.issym():
                    by_path[path] = Entry(path, "symlink", target=member.linkname)
                elif member.isfile():
                    f = tar.extractfile(member)
                    contents[path] = f.read() if f else b""
                    by_path[path] = Entry(path, "file", member.mode, contents[path])
                elif member.islnk():  # a hard link: the same bytes under another name
                    target = member.linkname.removeprefix("./")
                    by_path[path] = Entry(path, "file", member.mode, contents.get(target, b""))
    return list(by_path.values()), versions


def merge(*layers: list[Entry]) -> list[Entry]:
    """Layers stacked as one: a later entry replaces an earlier one at the same path."""
    by_path: dict[str, Entry] = {}
    for layer in layers:
        for entry in layer:
            by_path[entry.path] = entry
    return list(by_path.values())


def debian_inputs(packages: list[str], debs: Path, layout_version: bytes) -> bytes:
    return layout_version + "\n".join(d.name for d in fetch_debs(packages, debs)).encode()


def debian_layer(packages: list[str], debs: Path, what: str) -> list[Entry]:
    """The packages on a Debian slim base (`packages` should include DEBIAN_BASE), with what their
    maintainer scripts would have put in place."""
    files, versions = deb_entries(fetch_debs(packages, debs))
    log(f"{what}: " + " ".join(versions))
    master = {e.path: e.data for e in files if e.path.startswith("usr/share/base-passwd/")}
    own = [
        # base-passwd's postinst copies these into place, and dash's makes /bin/sh; maintainer
        # scripts do not run here.
        Entry("etc/passwd", "file", 0o644, master["usr/share/base-passwd/passwd.master"]),
        Entry("etc/group", "file", 0o644, master["usr/share/base-passwd/group.master"]),
        Entry("bin/sh", "symlink", target="dash"),
        Entry("tmp", "dir", 0o1777),
    ]
    return merge(files, own)
