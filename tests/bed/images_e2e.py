#!/usr/bin/env python3
"""Build the container images Kubernetes' [NodeConformance] e2e specs run, locally, under their
exact names, and import them into a containerd.

No registry is reachable here, so each image is rebuilt from the real software it holds, packed
by tests/bed/images.py (one deterministic layer, an OCI layout tar cached under
``$PYKUBELET_CACHE/images/``, imported with ctr):

* ``registry.k8s.io/e2e-test-images/busybox:1.37.0-1`` -- BusyBox 1.37.0 built from its upstream
  source with upstream's default configuration (tests/bed/build-busybox.sh), as the official
  busybox:1.37.0 image this tag wraps, with its applets linked in place.
* ``registry.k8s.io/pause:3.10.2`` -- the test bed's static pause program (tests/bed/pause.c).
* ``registry.k8s.io/e2e-test-images/agnhost:2.63.0`` -- agnhost compiled from its Go source in the
  k8s.io/kubernetes module (tests/bed/build-conformance.sh), on the userland its Dockerfile
  gives it: an Alpine base is BusyBox 1.37 plus bash, curl, netcat-openbsd and iproute2; here
  that BusyBox plus those tools from Debian 12 packages. Its porter certificates, /uploads, the agnhost-2 link
  and the user/group defined in the image are there; left out (no spec we run uses them, and
  they would have to be downloaded from elsewhere): coredns, dig, iperf, ipcs, and the fake
  registry's image store.
* ``registry.k8s.io/e2e-test-images/nonewprivs:1.4`` -- the nnp program (test/images/nonewprivs,
  built by build-conformance.sh) set-uid root on that BusyBox (upstream: on Alpine).
* ``registry.k8s.io/e2e-test-images/nonroot:1.5`` -- Debian 12 packages (upstream's base is
  Debian 12 too) with USER 1234.
* ``registry.k8s.io/e2e-test-images/glibc-dns-testing:2.0.0`` -- Debian 12 packages with
  dnsutils, as upstream's (which also downloads coredns from GitHub: left out, no spec we run
  uses it).

Debian packages are fetched with apt into ``$PYKUBELET_CACHE/e2e/debs`` (apt resolves their
dependencies against an empty package database, so nothing is installed on this machine) and
unpacked into the layer without their maintainer scripts; documentation is left out, as Debian's
own container base images do.

Usage: python3 tests/bed/images_e2e.py [--cache DIR] [--only NAME] [--no-import] [--snapshotter S]
(with CONTAINERD_ADDRESS set for another containerd than the main one).
"""
from __future__ import annotations

import argparse
import hashlib
import io
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import images as bed  # noqa: E402  (tests/bed/images.py: the OCI layout, cache and import helpers)
from images import Entry, ImageSpec  # noqa: E402

K8S_VERSION = os.environ.get("K8S_VERSION", "v1.36.3")
CACHE = Path(os.environ.get("PYKUBELET_CACHE", "/var/cache/pykubelet"))
E2E_BIN = CACHE / "e2e" / K8S_VERSION / "bin"  # agnhost and nnp, from build-conformance.sh
DEBS = CACHE / "e2e" / "debs"
BUSYBOX = CACHE / "e2e" / "busybox-1.37.0" / "busybox"  # from build-busybox.sh
# Go's module cache, where build-conformance.sh's k8s.io/kubernetes source is: k8s-module.sh's rule
# (PYKUBELET_GO_CACHE when set, as fresh-check.sh --link-only sets it).
GO_MODULES = Path(os.environ.get("PYKUBELET_GO_CACHE", CACHE / "go")) / "mod"
E2E_REGISTRY = "registry.k8s.io/e2e-test-images"
# Part of every image's cache key: bump it when the way a layer is put together changes.
LAYOUT_VERSION = b"e2e-layout-3\0"
# Where Debian's container base images drop files no program reads (dpkg path-exclude).
EXCLUDED = ("usr/share/doc/", "usr/share/man/", "usr/share/info/", "usr/share/locale/", "usr/share/lintian/")


def log(msg: str) -> None:
    print(f"images_e2e.py: {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------- Debian packages


def fetch_debs(packages: list[str], debs: Path = DEBS) -> list[Path]:
    """The .debs of `packages` and everything they depend on (no recommends), from the cache `debs`
    or apt.

    apt resolves against an empty status file, so it neither sees nor touches this machine's
    installed packages; NoLocking because nothing of the machine's dpkg state is written."""
    debs.mkdir(parents=True, exist_ok=True)
    (debs / "partial").mkdir(exist_ok=True)
    status = debs / ".empty-status"
    status.touch()
    apt = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "-o", "Debug::NoLocking=1",
           "-o", f"Dir::State::status={status}", "-o", f"Dir::Cache::archives={debs}"]
    names = _closure(apt, packages)
    if names is None:  # stale package lists (a version left the mirror): refresh them once
        log("apt cannot resolve the packages with the current lists; running apt-get update")
        subprocess.run(["apt-get", "update", "-q"], check=True, capture_output=True)
        names = _closure(apt, packages)
    if names is None:
        raise SystemExit(f"images_e2e.py: apt cannot resolve {packages}")
    if any(not (debs / name).is_file() for name in names):
        log(f"downloading Debian packages into {debs}: {' '.join(packages)} and their dependencies")
        r = subprocess.run([*apt, "--download-only", *packages], capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"images_e2e.py: apt-get download failed:\n{r.stderr.strip()}")
    return [debs / name for name in sorted(names)]


# Inst NAME (VERSION RELEASE [ARCH]) [what it breaks, if anything]
INST = re.compile(r"^Inst (?P<name>\S+) \((?P<version>\S+) .*\[(?P<arch>[a-z0-9]+)\]\)")


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


def _digest(path: Path) -> bytes:
    return hashlib.sha256(path.read_bytes()).digest()


def _program(name: str) -> Path:
    return _built(E2E_BIN / name)


def _built(path: Path) -> Path:
    if not path.is_file():
        raise SystemExit(f"images_e2e.py: {path} missing: run tests/bed/build-conformance.sh first")
    return path


def _k8s_source(relative: str) -> Path:
    """A file of the k8s.io/kubernetes module source (in the Go module cache)."""
    path = GO_MODULES / "k8s.io" / f"kubernetes@{K8S_VERSION}" / relative
    if not path.is_file():
        raise SystemExit(f"images_e2e.py: {path} missing: run tests/bed/build-conformance.sh first")
    return path


def busybox_inputs() -> bytes:
    return LAYOUT_VERSION + _digest(_built(BUSYBOX)) + bed.PASSWD.encode() + bed.GROUP.encode()


def busybox_layer(_workdir: Path) -> list[Entry]:
    """/bin/busybox and a link to it in /bin for each applet, as the official image lays it out
    (its build runs `busybox --install /bin`; specs run /bin/sysctl, /bin/true...), with the test
    bed's /etc/passwd and /etc/group."""
    applets = subprocess.run([str(BUSYBOX), "--list"], capture_output=True, text=True, check=True).stdout
    entries = [Entry(d, "dir", 0o755) for d in ("bin", "etc", "home", "usr", "usr/sbin", "var", "var/www")]
    entries += [Entry("root", "dir", 0o700), Entry("tmp", "dir", 0o1777),
                Entry("bin/busybox", "file", 0o755, BUSYBOX.read_bytes()),
                Entry("etc/passwd", "file", 0o644, bed.PASSWD.encode()),
                Entry("etc/group", "file", 0o644, bed.GROUP.encode())]
    for name in sorted(set(applets.split())):
        if name != "busybox" and "/" not in name and name not in (".", ".."):
            entries.append(Entry(f"bin/{name}", "symlink", target="busybox"))
    return entries


def merge(*layers: list[Entry]) -> list[Entry]:
    """Layers stacked as one: a later entry replaces an earlier one at the same path."""
    by_path: dict[str, Entry] = {}
    for layer in layers:
        for entry in layer:
            by_path[entry.path] = entry
    return list(by_path.values())


# ----------------------------------------------------------------------------- agnhost

AGNHOST_DEBS = ["bash", "curl", "netcat-openbsd", "iproute2"]
# Alpine's adduser/addgroup in agnhost's Dockerfile: the user and group some specs expect.
AGNHOST_USERS = "user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n"
AGNHOST_GROUPS = "user-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n"


def agnhost_inputs() -> bytes:
    debs = fetch_debs(AGNHOST_DEBS)
    return (busybox_inputs() + _digest(_program("agnhost")) + "\n".join(d.name for d in debs).encode()
            + _digest(_k8s_source("test/images/agnhost/porter/localhost.crt")) + AGNHOST_USERS.encode())


def agnhost_layer(workdir: Path) -> list[Entry]:
    tools, versions = deb_entries(fetch_debs(AGNHOST_DEBS))
    log("agnhost userland: busybox + " + " ".join(versions))
    porter = "test/images/agnhost/porter/"
    own = [
        Entry("agnhost", "file", 0o755, _program("agnhost").read_bytes()),
        Entry("agnhost-2", "symlink", target="agnhost"),
        Entry("uploads", "dir", 0o755),
        Entry("localhost.crt", "file", 0o644, _k8s_source(porter + "localhost.crt").read_bytes()),
        Entry("localhost.key", "file", 0o644, _k8s_source(porter + "localhost.key").read_bytes()),
        # netcat-openbsd's postinst makes this alternative (its maintainer scripts do not run
        # here); on Alpine the package's nc is the one in PATH too, not BusyBox's.
        Entry("bin/nc", "symlink", target="nc.openbsd"),
        Entry("usr/bin/nc", "symlink", target="/bin/nc.openbsd"),
        Entry("home", "dir", 0o755),
        Entry("home/user-defined-in-image", "dir", 0o755),
        Entry("etc/passwd", "file", 0o644, (bed.PASSWD + AGNHOST_USERS).encode()),
        Entry("etc/group", "file", 0o644, (bed.GROUP + AGNHOST_GROUPS).encode()),
    ]
    return merge(busybox_layer(workdir), tools, own)


# ----------------------------------------------------------------------- the others

# What Debian's slim container bases hold that these images' programs need (their "required" set
# would also bring apt, dpkg, login and more that no spec runs).
DEBIAN_BASE = ["base-files", "base-passwd", "bash", "coreutils", "dash", "grep", "sed", "findutils", "hostname"]
GLIBC_DNS_DEBS = [*DEBIAN_BASE, "bind9-dnsutils"]


def debian_inputs(packages: list[str]) -> bytes:
    return LAYOUT_VERSION + "\n".join(d.name for d in fetch_debs(packages)).encode()


def debian_layer(packages: list[str], what: str) -> list[Entry]:
    files, versions = deb_entries(fetch_debs(packages))
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


def nonewprivs_inputs() -> bytes:
    return busybox_inputs() + _digest(_program("nnp"))


def nonewprivs_layer(workdir: Path) -> list[Entry]:
    own = [Entry("usr/local", "dir", 0o755), Entry("usr/local/bin", "dir", 0o755),
           Entry("usr/local/bin/nnp", "file", 0o4755, _program("nnp").read_bytes())]  # chmod +s
    return merge(busybox_layer(workdir), own)


def _pause_config() -> dict:
    return dict(bed.IMAGES["pause"].config)


IMAGES: dict[str, ImageSpec] = {
    "busybox": ImageSpec("e2e-busybox", f"{E2E_REGISTRY}/busybox:1.37.0-1", busybox_inputs, busybox_layer,
                         {"Env": [bed.PATH_ENV], "Cmd": ["sh"]}),
    "pause": ImageSpec("e2e-pause", "registry.k8s.io/pause:3.10.2", bed.pause_inputs, bed.pause_layer,
                       _pause_config()),
    "agnhost": ImageSpec("e2e-agnhost", f"{E2E_REGISTRY}/agnhost:2.63.0", agnhost_inputs, agnhost_layer,
                         {"Env": [bed.PATH_ENV], "Entrypoint": ["/agnhost"], "Cmd": ["pause"],
                          "ExposedPorts": {f"{p}/tcp": {} for p in (80, 8080, 8081, 9376, 5000)}}),
    "nonewprivs": ImageSpec("e2e-nonewprivs", f"{E2E_REGISTRY}/nonewprivs:1.4", nonewprivs_inputs,
                            nonewprivs_layer, {"Env": [bed.PATH_ENV], "Cmd": ["nnp"]}),
    "nonroot": ImageSpec("e2e-nonroot", f"{E2E_REGISTRY}/nonroot:1.5", lambda: debian_inputs(DEBIAN_BASE),
                         lambda _: debian_layer(DEBIAN_BASE, "nonroot"),
                         {"Env": [bed.PATH_ENV], "User": "1234", "Cmd": ["bash"]}),
    "glibc-dns-testing": ImageSpec("e2e-glibc-dns-testing", f"{E2E_REGISTRY}/glibc-dns-testing:2.0.0",
                                   lambda: debian_inputs(GLIBC_DNS_DEBS),
                                   lambda _: debian_layer(GLIBC_DNS_DEBS, "glibc-dns-testing"),
                                   {"Env": [bed.PATH_ENV], "Cmd": ["bash"]}),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", default=str(CACHE), help="cache dir (default %(default)s)")
    ap.add_argument("--only", choices=sorted(IMAGES), action="append", help="only this image (repeatable)")
    ap.add_argument("--snapshotter", default=None, help="containerd snapshotter to unpack for")
    ap.add_argument("--no-import", action="store_true", help="only build the tars into the cache")
    args = ap.parse_args(argv)
    ctr = None
    if not args.no_import:
        ctr = bed.Ctr(args.snapshotter or bed.default_snapshotter())
        if not ctr.reachable():
            log("containerd does not answer (`ctr version` failed); pass --no-import to only build")
            return 1
    for key in args.only or sorted(IMAGES):
        print(bed.ensure(IMAGES[key], Path(args.cache), ctr), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
