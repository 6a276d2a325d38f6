"""The VM tier: real Debian 12 machines with systemd as PID 1 and cgroup v2 (tests/vm/machine.py),
provisioned by vagrant/provision/, the Vagrantfile's scripts.

test_vm_node.py is the part `make test` runs (one VM, brought up by Vagrant itself,
tests/vm/vagrant.py: install, kubeadm init, the unit, the systemd cgroup driver, restarts and a
stop). kubeadm_cluster.py is `make vm-cluster-test` (two VMs: kubeadm init and join). The VMs emulate their CPUs (TCG) and run ~19x slower than this host: the in-VM
work is kept small, and nothing here is timed as a test; tests/bench/vm.py measures.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from tests.progress import say
from tests.vm import bundle as bundles
from tests.vm.machine import REPO, STATE, Machine, Node, private_network, remove_state

BUNDLE_MOUNT = "/bundle"
PROVISION_ENV = {"PKL_BUNDLE": BUNDLE_MOUNT, "PKL_REPO": f"{BUNDLE_MOUNT}/repo"}


def image() -> Path:
    """The machine image (built once, cached): tests/bed/vm_image.sh."""
    say("vm", "the Debian 12 image (tests/bed/vm_image.sh: cached, else about 1.5 min to build)")
    result = subprocess.run(["bash", str(REPO / "tests" / "bed" / "vm_image.sh")], capture_output=True, text=True,
                            timeout=1800)
    assert result.returncode == 0, f"building the VM image failed:\n{result.stderr[-4000:]}"
    return Path(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def vm_bed() -> Iterator[tuple[Path, Path]]:
    """(the image, the bundle disk); the bundle goes at the end of the session."""
    built = image()
    work = STATE / "bundle"
    work.mkdir(parents=True, exist_ok=True)
    try:
        yield built, bundles.build(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        remove_state()


def boot(bed: tuple[Path, Path], name: str, number: int, private_port: int, peer_port: int,
         forwards: dict[int, int] | None = None) -> Machine:
    """A VM up, SSH answering and the bundle mounted where the provisioning reads it."""
    say("vm", f"{name}: booting (qemu with software emulation: about 1.5 min)")
    machine = Machine(name, number, bed[0], bed[1], private_port, peer_port, forwards=forwards or {}).up()
    machine.wait_for_ssh()
    mount_bundle(machine)
    return machine


def mount_bundle(machine: Machine) -> None:
    machine.ssh(f"mkdir -p {BUNDLE_MOUNT} && (mountpoint -q {BUNDLE_MOUNT} || mount -o ro LABEL=bundle {BUNDLE_MOUNT})")


def provision(machine: Machine, script: str, timeout: float = 1200, **env: str) -> str:
    """One of vagrant/provision/*.sh, as Vagrant's shell provisioner runs it (root, env given)."""
    say("vm", f"{machine.name}: vagrant/provision/{script} (minutes under emulation)")
    result = machine.ssh(f"bash {BUNDLE_MOUNT}/repo/vagrant/provision/{script}", timeout=timeout, check=False,
                         env={**PROVISION_ENV, **env})
    assert result.returncode == 0, (f"{machine.name}: provision/{script} failed ({result.returncode}):\n"
                                    f"{result.stdout[-3000:]}\n{result.stderr[-5000:]}\n"
                                    f"{journal(machine)}")
    return result.stdout + result.stderr


def journal(machine: Node, unit: str = "kubelet", lines: int = 60) -> str:
    result = machine.ssh(f"journalctl -u {unit} --no-pager -n {lines} -o cat", check=False, timeout=60)
    return f"--- journal of {unit} on {machine.name} ---\n{result.stdout[-6000:]}"


@pytest.fixture(scope="module")
def private_ports() -> tuple[int, int]:
    """The two ends of the private network (tests/vm/machine.py): the first VM's, the second's."""
    return private_network()
