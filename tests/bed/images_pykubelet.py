"""The image `pykubelet proxy` runs from as a DaemonSet: pykubelet and its dependencies, installed
from the wheelhouse (tests/bed/wheelhouse.py) without any network, on the Debian userland of the
kube-proxy image plus Debian 12's Python 3.11. images_addons.py puts the pieces together.

Its name is `localhost/pykubelet:<version of the wheel>`. No registry answers for `localhost`
on a node, and the manifest that runs it says `imagePullPolicy: Never`, so nothing ever tries to
pull it; an unqualified `pykubelet:<version>` would mean docker.io/library/pykubelet, someone
else's name. The tag is the package's version, which does not change with every edit of the
source: the cache key does (it covers the wheel's contents), so an image built from an older tree
is rebuilt and re-imported under the same name, never silently kept.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import wheelhouse  # noqa: E402  (pykubelet's wheel and its dependencies', offline)
from images import Entry  # noqa: E402

REPOSITORY = "localhost/pykubelet"
# Debian 12's python3 is 3.11; the wheels pip picks (cp311, manylinux) follow the Python running
# this, so it must be the same minor version.
PYTHON = (3, 11)
SITE_PACKAGES = "usr/local/lib/python3.11/dist-packages"  # on Debian's sys.path, outside dpkg's files
ENTRYPOINT = "usr/local/bin/pykubelet"
# What pip writes as the console script, with the image's interpreter instead of this machine's.
CONSOLE_SCRIPT = b"#!/usr/bin/python3\nimport sys\n\nfrom pykubelet.cli import main\n\nsys.exit(main())\n"


def build_wheels(directory: Path) -> Path:
    """pykubelet's wheel from this tree, and its dependencies' (downloaded once), into `directory`."""
    return wheelhouse.build(directory)


def pykubelet_wheel(directory: Path) -> Path:
    found = sorted(directory.glob("pykubelet-*.whl"))
    if len(found) != 1:
        raise SystemExit(f"images_pykubelet.py: want one pykubelet wheel in {directory}, found {len(found)}")
    return found[0]


def version(directory: Path) -> str:
    """The version the wheel was built as (pykubelet-VERSION-py3-none-any.whl)."""
    return pykubelet_wheel(directory).name.split("-")[1]


def image_name(directory: Path) -> str:
    return f"{REPOSITORY}:{version(directory)}"


def wheel_inputs(directory: Path) -> bytes:
    """The cache key's part for the Python side: every file inside pykubelet's wheel (names and
    bytes, not the zip's timestamps, so an unchanged tree gives the same key) and the other wheels
    by name and digest."""
    key = hashlib.sha256()
    with zipfile.ZipFile(pykubelet_wheel(directory)) as wheel:
        for name in sorted(wheel.namelist()):
            key.update(name.encode() + b"\0" + hashlib.sha256(wheel.read(name)).digest())
    for other in sorted(directory.glob("*.whl")):
        if not other.name.startswith("pykubelet-"):
            key.update(other.name.encode() + b"\0" + hashlib.sha256(other.read_bytes()).digest())
    return key.digest()


def installed(directory: Path, workdir: Path) -> list[Entry]:
    """pykubelet and its dependencies as pip installs them from `directory` alone (--no-index), at
    SITE_PACKAGES, plus the `pykubelet` command. No byte code: the interpreter writes its own
    into the container's layer, and .pyc files would carry this build's timestamps."""
    if sys.version_info[:2] != PYTHON:
        raise SystemExit(f"images_pykubelet.py: run with Python {'.'.join(map(str, PYTHON))} (the image's), "
                         f"not {sys.version.split()[0]}: pip picks the wheels for the Python that runs it")
    target = workdir / "site-packages"
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--find-links", str(directory),
           "--target", str(target), "--no-compile", "--no-warn-script-location", "--disable-pip-version-check",
           f"pykubelet=={version(directory)}"]
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    if r.returncode != 0:
        raise SystemExit(f"images_pykubelet.py: `{' '.join(cmd)}` failed:\n{r.stderr.strip()}")
    entries = [Entry(ENTRYPOINT, "file", 0o755, CONSOLE_SCRIPT)]
    for path in sorted(target.rglob("*")):
        relative = path.relative_to(target).as_posix()
        if relative == "bin" or relative.startswith("bin/") or "__pycache__" in path.parts:
            continue  # pip's scripts name this machine's interpreter; ENTRYPOINT replaces them
        entries.append(_entry(path, f"{SITE_PACKAGES}/{relative}"))
    return entries


def _entry(path: Path, at: str) -> Entry:
    if path.is_symlink():
        return Entry(at, "symlink", target=os.readlink(path))
    if path.is_dir():
        return Entry(at, "dir", 0o755)
    return Entry(at, "file", 0o755 if os.access(path, os.X_OK) else 0o644, path.read_bytes())


def dirs() -> list[Entry]:
    """The directories above SITE_PACKAGES and ENTRYPOINT that Debian's packages do not make."""
    paths = set()
    for path in (SITE_PACKAGES, ENTRYPOINT.rsplit("/", 1)[0]):
        parts = path.split("/")
        paths |= {"/".join(parts[:i]) for i in range(1, len(parts) + 1)}
    return [Entry(p, "dir", 0o755) for p in sorted(paths)]
