#!/usr/bin/env python3
"""Build the container images Kubernetes' [NodeConformance] and [Conformance] e2e specs run,
locally, under their exact names, and import them into a containerd.

No registry is reachable here, so each image is rebuilt from the real software it holds, packed
by tests/bed/images.py (one deterministic layer, an OCI layout tar cached under
``$PYKUBELET_CACHE/images/``, imported with ctr):

* ``registry.k8s.io/e2e-test-images/busybox:1.37.0-1`` -- BusyBox 1.37.0 built from its upstream
  source with upstream's default configuration (tests/bed/build-busybox.sh), as the official
  busybox:1.37.0 image this tag wraps, with its applets linked in place.
* ``registry.k8s.io/pause:3.10.2`` -- the test bed's static pause program (tests/bed/pause.c).
* ``registry.k8s.io/e2e-test-images/agnhost:2.63.0`` -- agnhost compiled from its Go source in the
  k8s.io/kubernetes module (tests/bed/build-conformance.sh), on the userland its Dockerfile
  gives it: an Alpine base is BusyBox 1.37 plus bind-tools, curl, netcat-openbsd, iproute2,
  iperf, bash and util-linux-misc; here that BusyBox plus the same tools from Debian 12 packages
  (bind9-dnsutils for dig and nslookup, iperf 2, util-linux, and libc-bin for the getent that
  Alpine's musl-utils gives). Its porter certificates, /uploads,
  the agnhost-2 link and the user/group defined in the image are there; left out (no
  [Conformance] spec uses them, and they would have to be downloaded from elsewhere): the
  coredns 1.6.2 release tarball and the fake registry's image store.
* ``registry.k8s.io/e2e-test-images/nonewprivs:1.4`` -- the nnp program (test/images/nonewprivs,
  built by build-conformance.sh) set-uid root on that BusyBox (upstream: on Alpine).
* ``registry.k8s.io/e2e-test-images/nonroot:1.5`` -- Debian 12 packages (upstream's base is
  Debian 12 too) with USER 1234.
* ``registry.k8s.io/e2e-test-images/glibc-dns-testing:2.0.0`` -- Debian 12 packages with
  dnsutils, as upstream's (which also downloads coredns from GitHub: left out, no spec we run
  uses it).

The images only the cluster-wide [Conformance] specs run (nginx, sample-apiserver, the older
agnhost tag, nautilus and kitten) are described in tests/bed/images_e2e_cluster.py; this program
builds both sets (--only picks some). Debian packages are fetched and unpacked as
tests/bed/images_e2e_debs.py describes, cached in ``$PYKUBELET_CACHE/e2e/debs``.

Usage: python3 tests/bed/images_e2e.py [--cache DIR] [--only NAME] [--no-import] [--snapshotter S]
(with CONTAINERD_ADDRESS set for another containerd than the main one).
"""
from __future__ import annotations

import argparse
import functools
import hashlib
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import images as bed  # noqa: E402  (tests/bed/images.py: the OCI layout, cache and import helpers)
from images import Entry, ImageSpec  # noqa: E402
from images_e2e_cluster import Inputs, cluster_images  # noqa: E402
# fetch_debs, deb_entries, merge and log are also used from here by images_addons.py.
from images_e2e_debs import (DEBIAN_BASE, deb_entries, debian_inputs, debian_layer,  # noqa: E402,F401
                             fetch_debs, log, merge)

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


# ----------------------------------------------------------------------------- agnhost

# Alpine's bind-tools, curl, netcat-openbsd, iproute2, iperf, bash and util-linux-misc in Debian.
# libc-bin: getent, which Alpine's musl-utils gives upstream's image and the DNS specs' probes run
AGNHOST_DEBS = ["bash", "curl", "netcat-openbsd", "iproute2", "bind9-dnsutils", "iperf", "util-linux", "libc-bin"]
# Alpine's adduser/addgroup in agnhost's Dockerfile: the user and group some specs expect.
AGNHOST_USERS = "user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n"
AGNHOST_GROUPS = "user-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n"


def agnhost_inputs() -> bytes:
    debs = fetch_debs(AGNHOST_DEBS, DEBS)
    return (busybox_inputs() + _digest(_program("agnhost")) + "\n".join(d.name for d in debs).encode()
            + _digest(_k8s_source("test/images/agnhost/porter/localhost.crt")) + AGNHOST_USERS.encode())


# Unpacked once per run: the images built FROM agnhost stack their files on this layer too.
@functools.cache
def _agnhost_tools() -> tuple[Entry, ...]:
    tools, versions = deb_entries(fetch_debs(AGNHOST_DEBS, DEBS))
    log("agnhost userland: busybox + " + " ".join(versions))
    return tuple(tools)


def agnhost_layer(workdir: Path) -> list[Entry]:
    tools = list(_agnhost_tools())
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
        Entry("usr/local", "dir", 0o755),
        Entry("usr/local/bin", "dir", 0o755),
        Entry("usr/local/bin/iperf", "symlink", target="/usr/bin/iperf"),  # as its Dockerfile links it
        Entry("home", "dir", 0o755),
        Entry("home/user-defined-in-image", "dir", 0o755),
        Entry("etc/passwd", "file", 0o644, (bed.PASSWD + AGNHOST_USERS).encode()),
        Entry("etc/group", "file", 0o644, (bed.GROUP + AGNHOST_GROUPS).encode()),
    ]
    return merge(busybox_layer(workdir), tools, own)


# ----------------------------------------------------------------------- the others

GLIBC_DNS_DEBS = [*DEBIAN_BASE, "bind9-dnsutils"]


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
    "nonroot": ImageSpec("e2e-nonroot", f"{E2E_REGISTRY}/nonroot:1.5",
                         lambda: debian_inputs(DEBIAN_BASE, DEBS, LAYOUT_VERSION),
                         lambda _: debian_layer(DEBIAN_BASE, DEBS, "nonroot"),
                         {"Env": [bed.PATH_ENV], "User": "1234", "Cmd": ["bash"]}),
    "glibc-dns-testing": ImageSpec("e2e-glibc-dns-testing", f"{E2E_REGISTRY}/glibc-dns-testing:2.0.0",
                                   lambda: debian_inputs(GLIBC_DNS_DEBS, DEBS, LAYOUT_VERSION),
                                   lambda _: debian_layer(GLIBC_DNS_DEBS, DEBS, "glibc-dns-testing"),
                                   {"Env": [bed.PATH_ENV], "Cmd": ["bash"]}),
}
IMAGES.update(cluster_images(IMAGES["busybox"], IMAGES["agnhost"], Inputs(DEBS, LAYOUT_VERSION, _program, _k8s_source)))


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
