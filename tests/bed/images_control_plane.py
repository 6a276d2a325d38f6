#!/usr/bin/env python3
"""The control-plane images `kubeadm init` runs as static pods, built locally and imported.

Nothing can be pulled here, so the images kubeadm asks for (`kubeadm config images list`) are
built from the binaries build-control-plane.sh already made: each is one layer holding
/usr/local/bin/<binary> (kubeadm's manifests run `command: [kube-apiserver, ...]`, found on the
image's PATH; certificates and kubeconfigs come from hostPath mounts, so a static binary is all
an image needs). pause is tests/bed/pause.c under kubeadm's pause tag. Images that cannot be
built from those binaries (CoreDNS; kube-proxy, whose image also needs iptables) are reported
and left out here: `make addons` builds them (tests/bed/build-addons.sh); until then `kubeadm
init` skips their addons.

The OCI layout, the cache (keyed by the binaries' size and mtime) and the import are
tests/bed/images.py's; built tars live in $PYKUBELET_CACHE/images/, built once under a lock.

Usage: python3 tests/bed/images_control_plane.py [--address SOCKET] [--no-import]
"""
from __future__ import annotations

import argparse
import dataclasses
import fcntl
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import images  # noqa: E402  (tests/bed/images.py: OCI layout, cache, import)

K8S_VERSION = os.environ.get("K8S_VERSION", "v1.36.3")
BIN = Path(images.DEFAULT_CACHE) / "k8s" / K8S_VERSION / "bin"
BUILT_FROM_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd")


def kubeadm_images(kubeadm: Path = BIN / "kubeadm") -> list[str]:
    """The images kubeadm init pulls for this version, by kubeadm's own account."""
    out = subprocess.run([str(kubeadm), "config", "images", "list", "--kubernetes-version", K8S_VERSION],
                         capture_output=True, text=True, check=True).stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


def _binary_spec(name: str, reference: str) -> images.ImageSpec:
    binary = BIN / name

    def inputs() -> bytes:
        st = binary.stat()  # build-control-plane.sh replaces a binary only when it rebuilds it
        return f"{binary}\0{st.st_size}\0{st.st_mtime_ns}".encode()

    def layer(_workdir: Path) -> list[images.Entry]:
        return [images.Entry("usr", "dir"), images.Entry("usr/local", "dir"), images.Entry("usr/local/bin", "dir"),
                images.Entry(f"usr/local/bin/{name}", "file", 0o755, binary.read_bytes()),
                images.Entry("tmp", "dir", 0o1777)]

    return images.ImageSpec(short=name, name=reference, inputs=inputs, layer=layer,
                            config={"Env": [images.PATH_ENV], "Entrypoint": [f"/usr/local/bin/{name}"],
                                    "WorkingDir": "/"})


def specs(references: list[str]) -> tuple[list[images.ImageSpec], list[str]]:
    """(what can be built, what cannot) for kubeadm's image references."""
    buildable, missing = [], []
    for reference in references:
        base = reference.rsplit("/", 1)[-1].split(":", 1)[0]
        if base in BUILT_FROM_BINARIES and (BIN / base).is_file():
            buildable.append(_binary_spec(base, reference))
        elif base == "pause":
            buildable.append(dataclasses.replace(images.IMAGES["pause"], name=reference))
        else:
            missing.append(reference)
    return buildable, missing


def ensure(address: str | None, cache: Path) -> list[str]:
    """Build (once) and, with a containerd address, import every buildable image; the references
    that cannot be built."""
    buildable, missing = specs(kubeadm_images())
    for reference in missing:
        images.log(f"{reference}: not built here (no binary for it); kubeadm must skip its addon")
    ctr = None
    if address is not None:
        os.environ["CONTAINERD_ADDRESS"] = address  # ctr's socket
        ctr = images.Ctr(images.default_snapshotter())
        if not ctr.reachable():
            raise SystemExit(f"images_control_plane.py: containerd at {address} does not answer")
    (cache / "images").mkdir(parents=True, exist_ok=True)
    with open(cache / "images" / ".control-plane.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # concurrent first builds would each spend a minute
        for spec in buildable:
            images.log(f"ensuring {spec.name}")
            print(images.ensure(spec, cache, ctr), flush=True)
    return missing


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", default=images.DEFAULT_CACHE, help="cache dir (default %(default)s)")
    ap.add_argument("--address", default=os.environ.get("CONTAINERD_ADDRESS", "/run/containerd/containerd.sock"),
                    help="containerd socket to import into (default %(default)s)")
    ap.add_argument("--no-import", action="store_true", help="only build the tars into the cache")
    args = ap.parse_args(argv)
    ensure(None if args.no_import else args.address, Path(args.cache))
    return 0


if __name__ == "__main__":
    sys.exit(main())
