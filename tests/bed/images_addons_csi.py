#!/usr/bin/env python3
"""The CSI hostpath driver's images and its manifest, build/addons/csi-hostpath.yaml (addon_csi.py).

tests/bed/build-addons.sh builds the programs into $PYKUBELET_CACHE/addons/bin and calls this after
images_addons.py, with the same options. Each image is packed and imported as images_addons.py
packs the other add-ons' (one deterministic layer, cached in $PYKUBELET_CACHE/addons/images), under
the name the manifest runs it by:

* csi-attacher, csi-provisioner, csi-node-driver-registrar, livenessprobe: upstream's base is
  distroless "static"; here the same files as the CoreDNS image's, the program at the root as
  upstream's Dockerfiles copy it, run as root (distroless static:latest has no USER).
* hostpathplugin: upstream's base is Alpine with util-linux, coreutils, socat and tar (losetup for
  block volumes, du for volume sizes, tar for snapshots); here Debian 12's mount (losetup, mount),
  util-linux, coreutils, socat and tar with a shell, /hostpathplugin the entrypoint.

An image whose program build-addons.sh could not build (it says why) is reported and skipped; the
rest are packed. Usage: images_addons_csi.py --manifests DIR [--cache DIR] [--no-import]
[--snapshotter S] (with the environment build-addons.sh sets).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import addon_csi  # noqa: E402
import addon_manifests as manifests  # noqa: E402
import images as bed  # noqa: E402  (the OCI layout, cache and import)
import images_addons  # noqa: E402  (the distroless base, Debian userlands)
import images_e2e  # noqa: E402  (Debian packages into layers)
from images import Entry, ImageSpec  # noqa: E402

# Part of every image's cache key: bump it when the way a layer is put together changes.
LAYOUT_VERSION = b"addons-csi-layout-1\0"
HOSTPATH_DEBS = [*images_addons.DEBIAN_BASE, "mount", "util-linux", "socat", "tar"]
# The programs on the distroless base; each image is named as its program.
SIDECARS = ("csi-attacher", "csi-provisioner", "csi-node-driver-registrar", "livenessprobe")
HOSTPATH = "hostpathplugin"


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise SystemExit(f"images_addons_csi.py: {name} is not set: run it through tests/bed/build-addons.sh")
    return value


def base_name(reference: str) -> str:
    """registry.k8s.io/sig-storage/csi-attacher:v4.12.0 -> csi-attacher"""
    return reference.rsplit("/", 1)[-1].split(":", 1)[0]


def spec(program: str, reference: str, binary: Path, debs: Path) -> ImageSpec:
    """The image of `program` (built at `binary`) under `reference`."""
    def inputs(*parts: bytes) -> bytes:
        return LAYOUT_VERSION + b"\0".join(parts)

    config = {"Entrypoint": [f"/{program}"], "Env": [bed.PATH_ENV]}
    if program == HOSTPATH:
        return ImageSpec(f"addon-{program}", reference,
                         lambda: inputs(images_addons.file_digest(binary), images_addons.debian_inputs(debs, HOSTPATH_DEBS)),
                         lambda _: images_e2e.merge(images_addons.debian(debs, HOSTPATH_DEBS, program),
                                                    [Entry(program, "file", 0o755, binary.read_bytes())]),
                         config)
    distroless = images_addons.CA_BUNDLE.read_bytes() if images_addons.CA_BUNDLE.is_file() else b""
    return ImageSpec(f"addon-{program}", reference,
                     lambda: inputs(images_addons.file_digest(binary), distroless),
                     lambda _: [*images_addons.distroless_static(), Entry(program, "file", 0o755, binary.read_bytes())],
                     {**config, "WorkingDir": "/"})


def write_manifest(directory: Path) -> str:
    """Write csi-hostpath.yaml from the modules build-addons.sh names; its text."""
    sidecar_modules = _env("ADDONS_CSI_RBAC_MODULES").split()
    sidecar_sources = dict(zip(sidecar_modules, map(Path, _env("ADDONS_CSI_RBAC_SOURCES").split())))
    if len(sidecar_sources) != len(sidecar_modules):
        raise SystemExit("images_addons_csi.py: ADDONS_CSI_RBAC_MODULES and ADDONS_CSI_RBAC_SOURCES differ in length")
    manifest = addon_csi.hostpath(Path(_env("ADDONS_K8S_SOURCE")), _env("ADDONS_K8S_MODULE"), sidecar_sources,
                                  addon_csi.parse_tags(_env("ADDONS_CSI_TAGS")))
    if manifests.write(manifest, directory):
        images_e2e.log(f"wrote {directory / manifest.file_name}")
    return manifest.text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", default=bed.DEFAULT_CACHE, help="cache dir (default %(default)s)")
    ap.add_argument("--manifests", type=Path, required=True, help="where to write the manifest")
    ap.add_argument("--wheels", type=Path, default=None, help="accepted as images_addons.py does; unused here")
    ap.add_argument("--snapshotter", default=None, help="containerd snapshotter to unpack for")
    ap.add_argument("--no-import", action="store_true", help="only build the tars into the cache")
    args = ap.parse_args(argv)
    cache = Path(args.cache)
    bin_dir, debs = cache / "addons" / "bin", cache / "addons" / "debs"
    references = manifests.images_in(write_manifest(args.manifests))
    ctr = None
    if not args.no_import:
        ctr = bed.Ctr(args.snapshotter or bed.default_snapshotter())
        if not ctr.reachable():
            images_e2e.log("containerd does not answer (`ctr version` failed); pass --no-import to only build")
            return 1
    for reference in references:
        program = base_name(reference)
        if program not in (*SIDECARS, HOSTPATH):
            raise SystemExit(f"images_addons_csi.py: csi-hostpath.yaml runs {reference}, which nothing here builds")
        binary = bin_dir / program
        if not binary.is_file():
            images_e2e.log(f"{reference}: not packed: {binary} was not built (build-addons.sh said why)")
            continue
        print(bed.ensure(spec(program, reference, binary, debs), cache / "addons", ctr), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
