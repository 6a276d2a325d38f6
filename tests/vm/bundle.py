"""The bundle disk: what Vagrant and the network would give a VM, on a read-only ext4 disk.

    repo/     the source tree as it is now (tracked and untracked files, not ignored ones):
              Vagrant's /vagrant
    wheels/   pykubelet's wheel and its dependencies' (tests/bed/wheelhouse.py): `make install` offline
    bin/      kubeadm, kubectl, and the real kubelet (the benchmark's baseline), from the control
              plane build in /var/cache/pykubelet/k8s
    images/   the control-plane images kubeadm runs (tests/bed/images_control_plane.py), pause,
              and busybox for the test pods

The VMs mount it at /bundle and the provisioning reads it through PKL_BUNDLE and PKL_REPO.
Built per run into the state directory (a few hundred MB, a few seconds), removed with it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.bed import wheelhouse

REPO = Path(__file__).resolve().parents[2]
BED = REPO / "tests" / "bed"
K8S_BIN = Path("/var/cache/pykubelet/k8s/v1.36.3/bin")
TOOLS = ("kubeadm", "kubectl", "kubelet")
BUSYBOX = "docker.io/library/busybox:1.36"


def _built_tars(argv: list[str]) -> list[Path]:
    """The tar paths an image builder prints ("<name> <digest> built <path>")."""
    out = subprocess.run([sys.executable, *argv, "--no-import"], capture_output=True, text=True, check=True,
                         timeout=900).stdout
    return [Path(line.rsplit(" ", 1)[1]) for line in out.splitlines() if " built " in line]


def fill(tree: Path, with_repo: bool = True) -> None:
    """The bundle's tree under `tree`: wheels/, bin/, images/, and repo/ when with_repo (Vagrant
    syncs the source tree itself: tests/vm/vagrant_bundle.py leaves it out)."""
    shutil.rmtree(tree, ignore_errors=True)
    (tree / "bin").mkdir(parents=True)
    (tree / "images").mkdir()
    if with_repo:
        files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True,
                               check=True).stdout.decode().split("\0")
        for name in filter(None, files):
            source = REPO / name
            if source.is_file():
                (tree / "repo" / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, tree / "repo" / name)
    shutil.copytree(wheelhouse.build(), tree / "wheels", ignore=shutil.ignore_patterns(".lock"))
    for tool in TOOLS:
        shutil.copy2(K8S_BIN / tool, tree / "bin" / tool)
    tars = _built_tars([str(BED / "images_control_plane.py")]) + _built_tars([str(BED / "images.py"), "--only", "busybox"])
    for tar in tars:
        shutil.copy2(tar, tree / "images" / tar.name)


def build(target: Path) -> Path:
    """Make the bundle's tree under target/bundle and its disk target/bundle.raw; returns the disk."""
    tree = target / "bundle"
    fill(tree)
    disk = target / "bundle.raw"
    size_mib = int(subprocess.run(["du", "-sm", str(tree)], capture_output=True, text=True, check=True)
                   .stdout.split()[0]) * 13 // 10 + 64
    subprocess.run(["mkfs.ext4", "-q", "-F", "-L", "bundle", "-d", str(tree), str(disk), f"{size_mib}M"], check=True)
    shutil.rmtree(tree)
    return disk
