"""The offline bundle for `make vagrant-up`: what the provisioning would download on a connected
machine, in vagrant/.bundle/, which the Vagrantfile syncs to /bundle (PKL_BUNDLE) when it exists.

    bin/      kubeadm and kubectl
    images/   the control-plane images, pause, busybox (tests/vm/bundle.py's), and the images of
              kubeadm's add-ons, CoreDNS and kube-proxy (built by `make addons`; kube-proxy's runs
              only with PKL_SKIP_ADDONS=""), imported into containerd by provision/node.sh
    wheels/   pykubelet's wheel and its dependencies': `make install` offline

No repo/: Vagrant syncs the source tree to /vagrant itself. Rebuilt on every run (seconds);
`make vagrant-down` removes it, and without it the Vagrantfile downloads as on any machine.

Usage: python -m tests.vm.vagrant_bundle [DIR]   (default vagrant/.bundle; prints DIR)
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.progress import say
from tests.vm import bundle

DEFAULT = bundle.REPO / "vagrant" / ".bundle"
ADDON_IMAGES = Path("/var/cache/pykubelet/addons/images")
NOT_NEEDED = ("kubelet",)  # the real kubelet is the VM tier's benchmark baseline; the Vagrant nodes run pykubelet


ADDONS = {"coredns": "/coredns:", "kube-proxy": "/kube-proxy:"}
"""The add-on's name in the image cache -> how kubeadm's list names its image."""


def addon_tars() -> list[Path]:
    """The add-on images `make addons` built, for the tags this kubeadm asks for."""
    listed = subprocess.run([str(bundle.K8S_BIN / "kubeadm"), "config", "images", "list", "--kubernetes-version",
                             bundle.K8S_BIN.parent.name], capture_output=True, text=True, check=True).stdout.split()
    tars = []
    for addon, marker in ADDONS.items():
        image = next(line for line in listed if marker in line)
        tag = image.rsplit(":", 1)[1]
        found = sorted(ADDON_IMAGES.glob(f"addon-{addon}-{tag}-*.tar"), key=lambda p: p.stat().st_mtime)
        if not found:
            raise SystemExit(f"vagrant bundle: no image for {image} in {ADDON_IMAGES}: run `make addons` first")
        tars.append(found[-1])
    return tars


def build(tree: Path = DEFAULT) -> Path:
    say("vagrant", f"the offline bundle in {tree} (kubeadm, kubectl, images, wheels)")
    bundle.fill(tree, with_repo=False)
    for tool in NOT_NEEDED:
        (tree / "bin" / tool).unlink()
    for tar in addon_tars():
        shutil.copy2(tar, tree / "images" / tar.name)
    return tree


if __name__ == "__main__":
    print(build(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT))
