#!/usr/bin/env python3
"""The add-on images of a kubeadm cluster, packed from programs built here, under the names
kubeadm and the add-ons' manifests use, imported into containerd; and those manifests.

tests/bed/build-addons.sh builds the programs (into $PYKUBELET_CACHE/addons/bin) and calls this.
Each image is one deterministic layer packed by tests/bed/images.py (OCI layout tar cached in
$PYKUBELET_CACHE/addons/images, imported with ctr unless it is already there); its name is read
from kubeadm (`kubeadm config images list`) or from the manifest that runs it, never typed twice:

* CoreDNS and metrics-server: upstream's base is distroless "static" (users, CA certificates,
  /tmp; no shell); here the same files, with the machine's CA bundle. /coredns carries the file
  capability cap_net_bind_service=+ep and runs as nonroot, as upstream's Dockerfile makes it.
* kube-proxy: upstream's base is distroless-iptables (iptables legacy and nft, ipset, nftables,
  kmod, a few shell tools); here those Debian 12 packages with their libraries, plus conntrack
  (which upstream's lacks), and iptables set to the nft backend, Debian 12's default (upstream
  picks one at run time with iptables-wrapper, whose module the Go proxy does not serve).
* flannel: upstream's base is Alpine with iproute2, iptables, nftables, strongswan and
  wireguard-tools; here Debian's iproute2, iptables (nft) and nftables with a shell. Left out:
  strongswan and wireguard-tools (only the ipsec and wireguard backends use them).
* flannel-cni-plugin: upstream's base is Alpine (BusyBox); here the test bed's BusyBox, plus
  /flannel.
* pykubelet (for `pykubelet proxy`, no upstream counterpart): the kube-proxy image's Debian
  userland plus Debian 12's python3, and pykubelet with its dependencies installed from the
  wheelhouse (images_pykubelet.py).

Debian packages are fetched as images_e2e.py fetches them (nothing is installed on the machine).

Usage: images_addons.py --manifests DIR [--cache DIR] [--wheels DIR] [--no-import] [--snapshotter S]
(with the environment build-addons.sh sets).
"""
from __future__ import annotations

import argparse
import hashlib
import os
import struct
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import addon_manifests as manifests  # noqa: E402
import images as bed  # noqa: E402  (the OCI layout, cache and import)
import images_control_plane  # noqa: E402  (kubeadm's image names)
import images_e2e  # noqa: E402  (Debian packages into layers)
import images_pykubelet  # noqa: E402  (pykubelet from its wheels)
from images import Entry, ImageSpec  # noqa: E402

K8S_VERSION = os.environ.get("K8S_VERSION", "v1.36.3")
# Part of every image's cache key: bump it when the way a layer is put together changes.
LAYOUT_VERSION = b"addons-layout-1\0"
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
# distroless's /etc/passwd and /etc/group: root, nobody and nonroot (65532).
DISTROLESS_PASSWD = ("root:x:0:0:root:/root:/sbin/nologin\n"
                     "nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"
                     "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")
DISTROLESS_GROUP = "root:x:0:\nnobody:x:65534:\ntty:x:5:\nstaff:x:50:\nnonroot:x:65532:\n"
# struct vfs_cap_data, revision 2, effective, permitted = CAP_NET_BIND_SERVICE (bit 10): what
# `setcap cap_net_bind_service=+ep` writes.
NET_BIND_SERVICE_CAP = struct.pack("<5I", 0x02000001, 1 << 10, 0, 0, 0)
DEBIAN_BASE = ["base-files", "base-passwd", "dash", "coreutils", "grep"]
KUBE_PROXY_DEBS = [*DEBIAN_BASE, "iptables", "ipset", "nftables", "kmod", "conntrack"]
# `pykubelet proxy` runs the same netfilter tools as kube-proxy, under Debian 12's Python 3.11.
PYKUBELET_DEBS = [*KUBE_PROXY_DEBS, "python3"]
FLANNEL_DEBS = [*DEBIAN_BASE, "iptables", "nftables", "iproute2"]
# What Debian's iptables postinst points the plain names at (update-alternatives): the nft backend.
IPTABLES_ALTERNATIVES = [f"{family}{suffix}" for family in ("iptables", "ip6tables")
                         for suffix in ("", "-save", "-restore")]


class Paths:
    """Where the inputs are: the cache's programs and the module sources build-addons.sh names."""

    def __init__(self, cache: Path, wheels: Path | None = None):
        self.bin = cache / "addons" / "bin"
        self.debs = cache / "addons" / "debs"
        self.k8s_bin = cache / "k8s" / K8S_VERSION / "bin"
        self.wheels = wheels or cache / "wheels"  # wheelhouse.py's directory
        self.kubeadm = Path(os.environ.get("ADDONS_KUBEADM", self.k8s_bin / "kubeadm"))
        self.flannel_source = Path(_env("ADDONS_FLANNEL_SOURCE"))
        self.metrics_server_source = Path(_env("ADDONS_METRICS_SERVER_SOURCE"))

    def program(self, name: str) -> Path:
        path = self.k8s_bin / name if name == "kube-proxy" else self.bin / name
        if not path.is_file():
            raise SystemExit(f"images_addons.py: {path} missing: run tests/bed/build-addons.sh")
        return path


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise SystemExit(f"images_addons.py: {name} is not set: run it through tests/bed/build-addons.sh")
    return value


def file_digest(path: Path) -> bytes:
    return hashlib.sha256(path.read_bytes()).digest()


def _dirs(*paths: str) -> list[Entry]:
    return [Entry(p, "dir", 0o755) for p in paths]


def distroless_static() -> list[Entry]:
    entries = _dirs("etc", "etc/ssl", "etc/ssl/certs", "home", "home/nonroot", "var")
    entries += [Entry("root", "dir", 0o700), Entry("tmp", "dir", 0o1777),
                Entry("etc/passwd", "file", 0o644, DISTROLESS_PASSWD.encode()),
                Entry("etc/group", "file", 0o644, DISTROLESS_GROUP.encode()),
                Entry("etc/nsswitch.conf", "file", 0o644, b"hosts: files dns\n")]
    if CA_BUNDLE.is_file():
        entries.append(Entry("etc/ssl/certs/ca-certificates.crt", "file", 0o644, CA_BUNDLE.read_bytes()))
    return entries


def debian(debs: Path, packages: list[str], what: str) -> list[Entry]:
    """The packages' files, with what their maintainer scripts would have set up (which do not
    run here): /etc/passwd and /etc/group, /bin/sh, and iptables on its nft backend."""
    files, versions = images_e2e.deb_entries(images_e2e.fetch_debs(packages, debs))
    images_e2e.log(f"{what}: " + " ".join(versions))
    master = {e.path: e.data for e in files if e.path.startswith("usr/share/base-passwd/")}
    own = [Entry("etc/passwd", "file", 0o644, master["usr/share/base-passwd/passwd.master"]),
           Entry("etc/group", "file", 0o644, master["usr/share/base-passwd/group.master"]),
           Entry("bin/sh", "symlink", target="dash"), Entry("tmp", "dir", 0o1777),
           Entry("run", "dir", 0o755)]
    if "iptables" in packages:
        own += iptables_on_nft()
    return images_e2e.merge(files, own)


def iptables_on_nft() -> list[Entry]:
    """/usr/sbin/iptables and the rest as Debian's iptables postinst points them (its alternatives'
    default: the nft backend), each a link to its -nft variant in the same directory."""
    return [Entry(f"usr/sbin/{name}", "symlink", target=name.replace("tables", "tables-nft", 1))
            for name in IPTABLES_ALTERNATIVES]


def debian_inputs(debs: Path, packages: list[str]) -> bytes:
    return "\n".join(d.name for d in images_e2e.fetch_debs(packages, debs)).encode()


def specs(paths: Paths, names: dict[str, str]) -> list[ImageSpec]:
    """The six images; `names` maps each to its reference (from kubeadm, the manifests and the
    pykubelet wheel)."""
    program = paths.program

    def inputs(*parts: bytes) -> bytes:
        return LAYOUT_VERSION + b"\0".join(parts)

    distroless_inputs = CA_BUNDLE.read_bytes() if CA_BUNDLE.is_file() else b""
    local_bin = _dirs("usr", "usr/local", "usr/local/bin")
    opt_bin = _dirs("opt", "opt/bin")
    mk_docker_opts = paths.flannel_source / "dist" / "mk-docker-opts.sh"
    return [
        ImageSpec("addon-coredns", names["coredns"],
                  lambda: inputs(file_digest(program("coredns")), distroless_inputs),
                  lambda _: [*distroless_static(),
                             Entry("coredns", "file", 0o755, program("coredns").read_bytes(),
                                   xattrs=(("security.capability", NET_BIND_SERVICE_CAP),))],
                  {"User": "nonroot:nonroot", "WorkingDir": "/", "Entrypoint": ["/coredns"], "Env": [bed.PATH_ENV],
                   "ExposedPorts": {"53/tcp": {}, "53/udp": {}}}),
        ImageSpec("addon-metrics-server", names["metrics-server"],
                  lambda: inputs(file_digest(program("metrics-server")), distroless_inputs),
                  lambda _: [*distroless_static(),
                             Entry("metrics-server", "file", 0o755, program("metrics-server").read_bytes())],
                  {"User": "65534", "Entrypoint": ["/metrics-server"], "Env": [bed.PATH_ENV]}),
        ImageSpec("addon-kube-proxy", names["kube-proxy"],
                  lambda: inputs(file_digest(program("kube-proxy")), debian_inputs(paths.debs, KUBE_PROXY_DEBS)),
                  lambda _: images_e2e.merge(debian(paths.debs, KUBE_PROXY_DEBS, "kube-proxy"), local_bin, [
                      Entry("usr/local/bin/kube-proxy", "file", 0o755, program("kube-proxy").read_bytes())]),
                  {"Entrypoint": ["/usr/local/bin/kube-proxy"], "Env": [bed.PATH_ENV]}),
        ImageSpec("addon-flannel", names["flannel"],
                  lambda: inputs(file_digest(program("flanneld")), file_digest(program("install-conf")),
                                 file_digest(mk_docker_opts), debian_inputs(paths.debs, FLANNEL_DEBS)),
                  lambda _: images_e2e.merge(debian(paths.debs, FLANNEL_DEBS, "flannel"), opt_bin, [
                      Entry("opt/bin/flanneld", "file", 0o755, program("flanneld").read_bytes()),
                      Entry("opt/bin/install-conf", "file", 0o755, program("install-conf").read_bytes()),
                      Entry("opt/bin/mk-docker-opts.sh", "file", 0o755, mk_docker_opts.read_bytes())]),
                  {"Entrypoint": ["/opt/bin/flanneld"], "Env": [bed.PATH_ENV]}),
        ImageSpec("addon-flannel-cni-plugin", names["flannel-cni-plugin"],
                  lambda: inputs(file_digest(program("flannel")), bed.busybox_inputs()),
                  lambda workdir: [*bed.busybox_layer(workdir),
                                   Entry("flannel", "file", 0o755, program("flannel").read_bytes())],
                  {"Env": [bed.PATH_ENV], "Cmd": ["sh"]}),
        ImageSpec("addon-pykubelet", names["pykubelet"],
                  lambda: inputs(images_pykubelet.wheel_inputs(paths.wheels), debian_inputs(paths.debs, PYKUBELET_DEBS)),
                  lambda workdir: images_e2e.merge(debian(paths.debs, PYKUBELET_DEBS, "pykubelet"), images_pykubelet.dirs(),
                                                   images_pykubelet.installed(paths.wheels, workdir)),
                  {"Entrypoint": ["/" + images_pykubelet.ENTRYPOINT], "Env": [bed.PATH_ENV]}),
    ]


def image_names(paths: Paths, written: dict[str, str]) -> dict[str, str]:
    """Each image's reference: kubeadm's for CoreDNS and kube-proxy, the wheel's version for
    pykubelet, the manifests' for the rest."""
    kubeadm = images_control_plane.kubeadm_images(paths.kubeadm)
    by_base = {ref.rsplit("/", 1)[-1].split(":", 1)[0]: ref for ref in kubeadm}
    names = {"coredns": by_base["coredns"], "kube-proxy": by_base["kube-proxy"],
             "pykubelet": images_pykubelet.image_name(paths.wheels)}
    for ref in manifests.images_in(written["kube-flannel.yml"]) + manifests.images_in(written["metrics-server.yaml"]):
        names[ref.rsplit("/", 1)[-1].split(":", 1)[0]] = ref
    return names


def write_manifests(paths: Paths, directory: Path) -> dict[str, str]:
    """Write the four manifests; their texts by file name."""
    written = {}
    for manifest in (manifests.coredns(paths.kubeadm, K8S_VERSION),
                     manifests.pykubelet_proxy(paths.kubeadm, K8S_VERSION, images_pykubelet.image_name(paths.wheels)),
                     manifests.flannel(paths.flannel_source, _env("ADDONS_FLANNEL_MODULE")),
                     manifests.metrics_server(paths.metrics_server_source, _env("ADDONS_METRICS_SERVER_MODULE"),
                                              paths.k8s_bin / "kubectl")):
        if manifests.write(manifest, directory):
            images_e2e.log(f"wrote {directory / manifest.file_name}")
        written[manifest.file_name] = manifest.text
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", default=bed.DEFAULT_CACHE, help="cache dir (default %(default)s)")
    ap.add_argument("--manifests", type=Path, required=True, help="where to write the manifests")
    ap.add_argument("--wheels", type=Path, default=None, help="wheelhouse directory (default CACHE/wheels)")
    ap.add_argument("--snapshotter", default=None, help="containerd snapshotter to unpack for")
    ap.add_argument("--no-import", action="store_true", help="only build the tars into the cache")
    args = ap.parse_args(argv)
    cache = Path(args.cache)
    paths = Paths(cache, args.wheels)
    images_pykubelet.build_wheels(paths.wheels)  # from this tree, every run: the image's key follows it
    names = image_names(paths, write_manifests(paths, args.manifests))
    ctr = None
    if not args.no_import:
        ctr = bed.Ctr(args.snapshotter or bed.default_snapshotter())
        if not ctr.reachable():
            images_e2e.log("containerd does not answer (`ctr version` failed); pass --no-import to only build")
            return 1
    for spec in specs(paths, names):
        print(bed.ensure(spec, cache / "addons", ctr), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
