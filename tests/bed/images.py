#!/usr/bin/env python3
"""Build pykubelet's test-bed container images locally and import them into containerd.

Nothing can be pulled from a container registry on our machines, so the two images
the test bed needs are built here from local files, as OCI image layouts packed in a
tar, then imported with ``ctr -n k8s.io images import``:

* ``registry.k8s.io/pause:3.9``   -- our own static pause program (tests/bed/pause.c)
* ``docker.io/library/busybox:1.36`` -- Debian's busybox-static plus applet symlinks

Standard library only. Everything is deterministic (sorted tar entries, mtime 0,
uid/gid 0, gzip mtime 0), so the same inputs give the same manifest digest, and a
rerun is fast: built tars are cached under ``$PYKUBELET_CACHE/images/`` keyed by
their inputs, and an image already in containerd with the same manifest digest
(and unpacked for the configured snapshotter) is left alone.

Usage: python3 tests/bed/images.py [--cache DIR] [--only pause|busybox] [--no-import]
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
NAMESPACE = "k8s.io"
DEFAULT_CACHE = os.environ.get("PYKUBELET_CACHE", "/var/cache/pykubelet")
CONTAINERD_CONFIG = os.environ.get(
    "PYKUBELET_CONTAINERD_CONFIG", "/etc/pykubelet/containerd.toml"
)
# Bump when the way images are laid out changes, so cached tars are rebuilt.
BUILD_VERSION = "1"

PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CREATED = "1970-01-01T00:00:00Z"
MANAGED_LABEL = "io.cri-containerd.image=managed"

MT_INDEX = "application/vnd.oci.image.index.v1+json"
MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
ANN_REF_NAME = "org.opencontainers.image.ref.name"
ANN_CONTAINERD_NAME = "io.containerd.image.name"


def log(msg: str) -> None:
    print(f"images.py: {msg}", file=sys.stderr, flush=True)


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def canonical_json(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


# --------------------------------------------------------------------------- tar


@dataclass(frozen=True)
class Entry:
    """One member of a layer: a directory, a regular file or a symlink."""

    path: str  # relative, no leading slash
    kind: str  # "dir" | "file" | "symlink"
    mode: int = 0o755
    data: bytes = b""
    target: str = ""
    # Extended attributes (name -> raw value), e.g. a file capability (security.capability).
    xattrs: tuple[tuple[str, bytes], ...] = ()


def deterministic_tar(entries: list[Entry]) -> bytes:
    """A tar with sorted entries, mtime 0, uid/gid 0 and no user/group names."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for e in sorted(entries, key=lambda e: e.path):
            ti = tarfile.TarInfo(e.path)
            ti.mtime = 0
            ti.uid = ti.gid = 0
            ti.uname = ti.gname = ""
            ti.mode = e.mode
            if e.xattrs:
                # The PAX records containerd's unpacker turns into setxattr calls; the raw bytes
                # survive tarfile's encoding through surrogateescape (it marks them BINARY).
                ti.pax_headers = {"SCHILY.xattr." + k: v.decode("utf-8", "surrogateescape")
                                  for k, v in e.xattrs}
            if e.kind == "dir":
                ti.type = tarfile.DIRTYPE
                tar.addfile(ti)
            elif e.kind == "symlink":
                ti.type = tarfile.SYMTYPE
                ti.linkname = e.target
                ti.mode = 0o777
                tar.addfile(ti)
            elif e.kind == "file":
                ti.type = tarfile.REGTYPE
                ti.size = len(e.data)
                tar.addfile(ti, io.BytesIO(e.data))
            else:  # pragma: no cover - programming error
                raise ValueError(f"unknown entry kind {e.kind!r}")
    return buf.getvalue()


def deterministic_gzip(data: bytes) -> bytes:
    out = io.BytesIO()
    # filename="" and mtime=0 keep the gzip header free of anything variable.
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, compresslevel=6, mtime=0) as gz:
        gz.write(data)
    return out.getvalue()


# --------------------------------------------------------------------- image specs


@dataclass
class ImageSpec:
    short: str  # CLI name: pause | busybox
    name: str  # full reference, e.g. registry.k8s.io/pause:3.9
    inputs: Callable[[], bytes]  # cheap fingerprint of everything the build reads
    layer: Callable[[Path], list[Entry]]  # builds the single layer's entries
    config: dict = field(default_factory=dict)  # OCI "config" section


# ---- pause

PAUSE_SRC = HERE / "pause.c"
# The real registry.k8s.io/pause:3.9 runs as 65535:65535; pause needs no
# privileges, and the sandbox works with it here (checked end to end with
# containerd's CRI RunPodSandbox), so we keep the upstream user.
PAUSE_USER = "65535:65535"


def _gcc_version() -> bytes:
    try:
        return subprocess.run(
            ["gcc", "-dumpfullversion", "-dumpversion"], capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return b"no-gcc"


def pause_inputs() -> bytes:
    return PAUSE_SRC.read_bytes() + b"\0" + _gcc_version()


def pause_layer(workdir: Path) -> list[Entry]:
    out = workdir / "pause"
    cmd = ["gcc", "-static", "-Os", "-s", "-o", str(out), str(PAUSE_SRC)]
    log("compiling pause: " + " ".join(cmd))
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(
            f"images.py: gcc failed (rc={r.returncode}); on Debian `gcc -static` needs "
            f"libc6-dev (libc.a):\n{r.stderr}"
        )
    return [Entry("pause", "file", 0o755, out.read_bytes())]


# ---- busybox

BUSYBOX_BIN = Path(os.environ.get("PYKUBELET_BUSYBOX", "/bin/busybox"))

PASSWD = (
    "root:x:0:0:root:/root:/bin/sh\n"
    "daemon:x:1:1:daemon:/usr/sbin:/bin/false\n"
    "nobody:x:65534:65534:nobody:/home:/bin/false\n"
)
GROUP = "root:x:0:\n" "daemon:x:1:\n" "nobody:x:65534:\n"


def _busybox_applets() -> list[str]:
    if not BUSYBOX_BIN.is_file():
        raise SystemExit(
            f"images.py: {BUSYBOX_BIN} not found (apt-get install busybox-static)"
        )
    out = subprocess.run(
        [str(BUSYBOX_BIN), "--list"], capture_output=True, text=True, check=True
    ).stdout
    names = sorted({n.strip() for n in out.split() if n.strip()})
    bad = [n for n in names if "/" in n or n in (".", "..")]
    if bad:
        raise SystemExit(f"images.py: unexpected applet names from busybox --list: {bad}")
    return [n for n in names if n != "busybox"]


def busybox_inputs() -> bytes:
    return (
        hashlib.sha256(BUSYBOX_BIN.read_bytes()).digest()
        + "\n".join(_busybox_applets()).encode()
        + PASSWD.encode()
        + GROUP.encode()
    )


def busybox_layer(_workdir: Path) -> list[Entry]:
    entries = [
        Entry("bin", "dir", 0o755),
        Entry("bin/busybox", "file", 0o755, BUSYBOX_BIN.read_bytes()),
        Entry("etc", "dir", 0o755),
        Entry("etc/passwd", "file", 0o644, PASSWD.encode()),
        Entry("etc/group", "file", 0o644, GROUP.encode()),
        Entry("root", "dir", 0o700),
        Entry("tmp", "dir", 0o1777),
        Entry("var", "dir", 0o755),
        Entry("var/www", "dir", 0o755),
    ]
    entries += [Entry(f"bin/{a}", "symlink", target="busybox") for a in _busybox_applets()]
    return entries


IMAGES: dict[str, ImageSpec] = {
    "pause": ImageSpec(
        short="pause",
        name="registry.k8s.io/pause:3.9",
        inputs=pause_inputs,
        layer=pause_layer,
        config={
            "User": PAUSE_USER,
            "Env": [PATH_ENV],
            "Entrypoint": ["/pause"],
            "WorkingDir": "/",
        },
    ),
    "busybox": ImageSpec(
        short="busybox",
        name="docker.io/library/busybox:1.36",
        inputs=busybox_inputs,
        layer=busybox_layer,
        config={"Env": [PATH_ENV], "Cmd": ["sh"]},
    ),
}


# ------------------------------------------------------------------- OCI layout


def build_layout_tar(spec: ImageSpec, workdir: Path) -> tuple[bytes, str]:
    """Return (tar of the OCI image layout, manifest digest)."""
    layer_tar = deterministic_tar(spec.layer(workdir))
    layer_gz = deterministic_gzip(layer_tar)

    config = {
        "created": CREATED,
        "architecture": "amd64",
        "os": "linux",
        "config": spec.config,
        "rootfs": {"type": "layers", "diff_ids": [sha256(layer_tar)]},
        "history": [{"created": CREATED, "created_by": "pykubelet tests/bed/images.py"}],
    }
    config_b = canonical_json(config)
    manifest = {
        "schemaVersion": 2,
        "mediaType": MT_MANIFEST,
        "config": {"mediaType": MT_CONFIG, "digest": sha256(config_b), "size": len(config_b)},
        "layers": [
            {"mediaType": MT_LAYER_GZIP, "digest": sha256(layer_gz), "size": len(layer_gz)}
        ],
    }
    manifest_b = canonical_json(manifest)
    manifest_digest = sha256(manifest_b)
    index = {
        "schemaVersion": 2,
        "mediaType": MT_INDEX,
        "manifests": [
            {
                "mediaType": MT_MANIFEST,
                "digest": manifest_digest,
                "size": len(manifest_b),
                "platform": {"architecture": "amd64", "os": "linux"},
                # containerd's importer takes the name from io.containerd.image.name,
                # else from ref.name; a full reference is kept as-is.
                "annotations": {ANN_REF_NAME: spec.name, ANN_CONTAINERD_NAME: spec.name},
            }
        ],
    }

    entries = [
        Entry("oci-layout", "file", 0o644, canonical_json({"imageLayoutVersion": "1.0.0"})),
        Entry("index.json", "file", 0o644, canonical_json(index)),
        Entry("blobs", "dir", 0o755),
        Entry("blobs/sha256", "dir", 0o755),
    ]
    for blob in (layer_gz, config_b, manifest_b):
        entries.append(Entry("blobs/sha256/" + sha256(blob)[7:], "file", 0o644, blob))
    return deterministic_tar(entries), manifest_digest


def manifest_digest_of(tar_path: Path) -> str:
    with tarfile.open(tar_path) as tar:
        member = tar.extractfile("index.json")
        assert member is not None
        index = json.load(member)
    return index["manifests"][0]["digest"]


def cached_image(spec: ImageSpec, cache: Path) -> tuple[Path, str]:
    """Build (or reuse from cache) the image tar; return (path, manifest digest)."""
    key = hashlib.sha256(
        BUILD_VERSION.encode() + b"\0" + spec.name.encode() + b"\0" + spec.inputs()
    ).hexdigest()[:16]
    imgdir = cache / "images"
    imgdir.mkdir(parents=True, exist_ok=True)
    tag = spec.name.rsplit(":", 1)[1]
    path = imgdir / f"{spec.short}-{tag}-{key}.tar"
    if path.is_file():
        try:
            return path, manifest_digest_of(path)
        except (tarfile.TarError, KeyError, ValueError, AssertionError) as e:
            log(f"cached {path} unreadable ({e}); rebuilding")
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pykubelet-img-") as td:
        data, digest = build_layout_tar(spec, Path(td))
    tmp = path.with_suffix(".tar.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    # Drop stale tars of the same image built from other inputs.
    for old in imgdir.glob(f"{spec.short}-{tag}-*.tar"):
        if old != path:
            old.unlink(missing_ok=True)
    log(f"built {spec.name} -> {path} ({len(data)} bytes, {time.monotonic() - t0:.1f}s)")
    return path, digest


# ------------------------------------------------------------------ containerd


def default_snapshotter() -> str:
    env = os.environ.get("CONTAINERD_SNAPSHOTTER")
    if env:
        return env
    try:
        import tomllib

        with open(CONTAINERD_CONFIG, "rb") as f:
            cfg = tomllib.load(f)
        return cfg["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["snapshotter"]
    except (ImportError, OSError, KeyError, TypeError, ValueError):
        return "overlayfs"


class Ctr:
    def __init__(self, snapshotter: str):
        self.snapshotter = snapshotter

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        cmd = ["ctr", "--connect-timeout", "3s", "-n", NAMESPACE, *args]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if check and r.returncode != 0:
            raise SystemExit(
                f"images.py: `{' '.join(cmd)}` failed (rc={r.returncode}):\n"
                f"{r.stderr.strip() or r.stdout.strip()}"
            )
        return r

    def reachable(self) -> bool:
        return self.run("version", check=False).returncode == 0

    def images(self) -> dict[str, tuple[str, str]]:
        """name -> (target digest, labels column) from `ctr images ls`."""
        out = self.run("images", "ls").stdout.splitlines()
        res = {}
        for line in out[1:]:
            cols = line.split()
            # REF TYPE DIGEST SIZE(2 cols) PLATFORMS LABELS
            if len(cols) >= 3:
                res[cols[0]] = (cols[2], cols[-1])
        return res

    def unpacked(self) -> dict[str, bool]:
        """name -> unpacked for our snapshotter, from `ctr images check`."""
        out = self.run("images", "check", "--snapshotter", self.snapshotter).stdout
        res = {}
        for line in out.splitlines()[1:]:
            cols = line.split()
            # REF TYPE DIGEST STATUS("complete (2/2)") SIZE UNPACKED
            if len(cols) >= 3:
                res[cols[0]] = cols[-1] == "true" and "complete" in line
        return res

    def import_tar(self, tar_path: Path) -> None:
        # The name comes from the index.json annotations; --index-name is not used
        # on purpose: with the same name it would re-point the image at the index
        # instead of the manifest.
        self.run("images", "import", "--snapshotter", self.snapshotter, str(tar_path))

    def label_managed(self, name: str) -> None:
        self.run("images", "label", name, MANAGED_LABEL)


def ensure(spec: ImageSpec, cache: Path, ctr: Ctr | None) -> str:
    path, digest = cached_image(spec, cache)
    if ctr is None:
        return f"{spec.name} {digest} built {path}"
    current = ctr.images().get(spec.name)
    unpacked = ctr.unpacked().get(spec.name, False)
    if current and current[0] == digest and unpacked:
        if MANAGED_LABEL not in current[1]:
            ctr.label_managed(spec.name)
        return f"{spec.name} {digest} already present"
    if current and current[0] != digest:
        log(f"{spec.name}: replacing {current[0]} with {digest}")
    t0 = time.monotonic()
    ctr.import_tar(path)
    ctr.label_managed(spec.name)
    now = ctr.images().get(spec.name)
    if not now or now[0] != digest:
        raise SystemExit(
            f"images.py: after import {spec.name} points at {now and now[0]}, want {digest}"
        )
    if not ctr.unpacked().get(spec.name, False):
        raise SystemExit(
            f"images.py: {spec.name} imported but not complete/unpacked for "
            f"snapshotter {ctr.snapshotter}; see `ctr -n {NAMESPACE} images check`"
        )
    return f"{spec.name} {digest} imported ({time.monotonic() - t0:.1f}s)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", default=DEFAULT_CACHE, help="cache dir (default %(default)s)")
    ap.add_argument("--only", choices=sorted(IMAGES), action="append",
                    help="only this image (repeatable)")
    ap.add_argument("--snapshotter", default=None,
                    help="containerd snapshotter to unpack for (default: from "
                         f"{CONTAINERD_CONFIG}, else overlayfs)")
    ap.add_argument("--no-import", action="store_true",
                    help="only build the tars into the cache")
    args = ap.parse_args(argv)

    ctr = None
    if not args.no_import:
        ctr = Ctr(args.snapshotter or default_snapshotter())
        if not ctr.reachable():
            log("containerd does not answer (`ctr version` failed); start it first "
                "(tests/bed/setup.sh) or pass --no-import")
            return 1
    for short in args.only or sorted(IMAGES):
        print(ensure(IMAGES[short], Path(args.cache), ctr), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
