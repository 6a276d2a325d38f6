"""A Debian 12 VM of the test bed: qemu with software emulation (TCG) booting the image
tests/bed/vm_image.sh builds, reached over SSH as Vagrant reaches a box.

Why plain qemu as well as Vagrant (tests/vm/vagrant.py, which `make test` and `make vagrant-test`
use): the tests that power a machine off and boot it again (node_shutdown.py), try a proxy mode
on one node (ipvs_proxy.py) or compare agents (tests/bench/vm.py) drive qemu directly, with no
libvirt daemons, network or box import in between; the same qemu with TCG runs underneath either
way (this machine's /dev/kvm runs only PVM guest kernels). These VMs run the very provisioning
scripts the Vagrantfile runs (vagrant/provision/), with what Vagrant would hand them: the source
tree (here on a read-only disk with the wheels, binaries and images, since nothing can be
downloaded), the private network's address, the token.

Each VM: the image's root filesystem through its own qcow2 overlay (the image stays as built),
the bundle disk read-only, 2 CPUs and 2 GiB (kubeadm's preflight minimum for a control plane),
a user-mode NIC that reaches nothing but the SSH port forwarded from 127.0.0.1 (restrict=on),
and a NIC on a private network that exists only between two VMs: each qemu sends the frames to the
other's UDP port on loopback (qemu's socket netdev in udp mode; no bridge or tap on the host).
Datagrams, not a stream: with `listen`/`connect` a VM that started before its peer listened, or
whose connection dropped, was cut off for good (qemu never reconnects), and so was a worker
powered off and booted again. `down` kills qemu and removes the overlay.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

REPO = Path(__file__).resolve().parents[2]
INSECURE_KEY_GLOB = "/usr/share/rubygems-integration/all/gems/vagrant-*/keys/vagrant"
STATE = Path(os.environ.get("PYKUBELET_VM_STATE", "/var/lib/pykubelet-vm"))
MEMORY_MIB = 2048
CPUS = 2



class Node(Protocol):
    """A machine the tests run commands on as root: a Machine here, or one of the Vagrantfile's
    (tests/vm/vagrant.py)."""
    name: str

    def ssh(self, command: str, timeout: float = 300, check: bool = True,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]: ...


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def private_network() -> tuple[int, int]:
    """Two free UDP ports on loopback: the two ends of a private network (one per VM)."""
    with socket.socket(type=socket.SOCK_DGRAM) as a, socket.socket(type=socket.SOCK_DGRAM) as b:
        a.bind(("127.0.0.1", 0))
        b.bind(("127.0.0.1", 0))
        return a.getsockname()[1], b.getsockname()[1]


def insecure_key() -> Path:
    """Vagrant's insecure private key from Debian's vagrant package, as ssh wants it (mode 0600)."""
    found = sorted(Path("/").glob(INSECURE_KEY_GLOB.lstrip("/")))
    if not found:
        raise RuntimeError("Debian's vagrant package is not installed (tests/vm/setup.sh installs it)")
    copy = STATE / "vagrant-insecure-key"
    STATE.mkdir(parents=True, exist_ok=True)
    if not copy.exists():
        copy.write_bytes(found[-1].read_bytes())
        copy.chmod(0o600)
    return copy


def remove_state() -> None:
    """The state directory gone (the key copy with it) once no VM is left in it."""
    STATE.joinpath("vagrant-insecure-key").unlink(missing_ok=True)
    try:
        STATE.rmdir()
    except OSError:
        pass


@dataclass
class Machine:
    name: str
    number: int
    """Its address on the private network is 192.168.56.<number> (the image's networkd matches the MAC)."""
    image: Path
    bundle: Path
    private_port: int
    """This VM's end of the private network: the UDP port on loopback its qemu receives on."""
    peer_port: int
    """The other VM's end, where this one's frames go (nobody there: the frames are dropped)."""
    ssh_port: int = field(default_factory=free_port)
    forwards: dict[int, int] = field(default_factory=dict)
    """More guest ports reachable on 127.0.0.1 (guest port -> host port), e.g. the apiserver's."""
    proc: subprocess.Popen[bytes] | None = None
    booted_at: float = 0.0

    @property
    def ip(self) -> str:
        return f"192.168.56.{self.number}"

    @property
    def state(self) -> Path:
        return STATE / self.name

    @property
    def console(self) -> Path:
        return self.state / "console.log"

    def up(self) -> "Machine":
        self.down()
        self.state.mkdir(parents=True)
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", str(self.image / "rootfs.raw"),
                        str(self.state / "root.qcow2")], check=True)
        return self.start()

    def poweroff(self, timeout: float = 300) -> None:
        """A clean shutdown (qemu exits: -no-reboot); the disk stays for `start`."""
        self.ssh("systemctl poweroff", timeout=60, check=False)
        assert self.proc is not None
        self.proc.wait(timeout=timeout)
        self.proc = None

    def start(self) -> "Machine":
        """Boot from the machine's disk as it is (a fresh one after `up`, the same after `poweroff`)."""
        overlay = self.state / "root.qcow2"
        nat = ",".join(f"hostfwd=tcp:127.0.0.1:{host}-:{guest}" for guest, host in {22: self.ssh_port,
                                                                                   **self.forwards}.items())
        private = f"udp=127.0.0.1:{self.peer_port},localaddr=127.0.0.1:{self.private_port}"
        argv = [
            "qemu-system-x86_64", "-name", self.name, "-machine", "q35", "-accel", "tcg,thread=multi",
            "-cpu", "max", "-smp", str(CPUS), "-m", str(MEMORY_MIB), "-display", "none", "-monitor", "none",
            "-serial", f"file:{self.console}", "-no-reboot",
            "-kernel", str(self.image / "vmlinuz"), "-initrd", str(self.image / "initrd.img"),
            "-append", f"root=/dev/vda rw console=ttyS0 systemd.hostname={self.name} quiet",
            "-drive", f"file={overlay},if=virtio,format=qcow2",
            "-drive", f"file={self.bundle},if=virtio,format=raw,readonly=on",
            "-netdev", f"user,id=nat,restrict=on,{nat}",
            "-device", "virtio-net-pci,netdev=nat,mac=52:54:00:12:34:56",
            "-netdev", f"socket,id=private,{private}",
            "-device", f"virtio-net-pci,netdev=private,mac=52:54:00:56:00:{self.number}",
        ]
        self.booted_at = time.time()
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=open(self.state / "qemu.log", "wb"),
                                     stderr=subprocess.STDOUT, start_new_session=True)
        (self.state / "qemu.pid").write_text(str(self.proc.pid))
        return self

    def wait_for_ssh(self, timeout: float = 420) -> float:
        """Seconds from qemu's start until SSH answers; raises with the console's tail if it never does."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"{self.name}: qemu exited ({self.proc.returncode}):\n{self.tail()}")
            if self.ssh("true", timeout=30, check=False).returncode == 0:
                return time.time() - self.booted_at
            time.sleep(2)
        raise AssertionError(f"{self.name}: no SSH after {timeout:.0f}s:\n{self.tail()}")

    def tail(self, chars: int = 4000) -> str:
        out = []
        for log in (self.state / "qemu.log", self.console):
            try:
                out.append(f"--- {log.name} ---\n{log.read_text(errors='replace')[-chars:]}")
            except FileNotFoundError:
                pass
        return "\n".join(out)

    def ssh(self, command: str, timeout: float = 300, check: bool = True,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """`command` as root on the VM (sudo, as `vagrant ssh -c` with a privileged provisioner)."""
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items())
        remote = f"sudo {'env ' + exports if exports else ''} bash -c {shlex.quote(command)}"
        argv = ["ssh", "-q", "-i", str(insecure_key()), "-p", str(self.ssh_port), "-o", "BatchMode=yes",
                "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=20",
                "-o", "ServerAliveInterval=15", "vagrant@127.0.0.1", remote]
        try:
            result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            if not check:
                return subprocess.CompletedProcess(argv, 124, str(e.stdout or ""), "timed out")
            raise AssertionError(f"{self.name}: `{command}` timed out after {timeout:.0f}s") from None
        if check and result.returncode != 0:
            raise AssertionError(f"{self.name}: `{command}` failed ({result.returncode}):\n"
                                 f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
        return result

    def down(self) -> None:
        """qemu killed, the overlay and logs removed: nothing of the VM stays on the host."""
        pid_file = self.state / "qemu.pid"
        if pid_file.exists():
            pid = int(pid_file.read_text())
            try:
                if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"qemu-system"):
                    os.kill(pid, signal.SIGKILL)
            except (FileNotFoundError, ProcessLookupError):
                pass
        if self.proc is not None:
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
            self.proc = None
        subprocess.run(["rm", "-rf", str(self.state)], check=False)
