"""The project's Vagrantfile run by Vagrant itself (vagrant-libvirt, qemu's software emulation),
offline, as `make vagrant-up` runs it (tests/bed/vagrant.sh): the box pykubelet/debian12, the
bundle synced in, the control plane `cp` and PKL_WORKERS workers. `vagrant_cluster` brings it up
for a block and destroys it after (`make vagrant-down`), and reaches its machines over SSH with
the settings `vagrant ssh-config` gives.

Used by `make vagrant-test` (tests/vm/vagrant_cluster.py: cp and a worker) and by the one-VM part
of `make test` (tests/vm/test_vm_node.py: cp alone).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterator

from tests.progress import say
from tests.vm.kubeadm_cluster import Cluster
from tests.vm.machine import REPO

VAGRANT_SH = REPO / "tests" / "bed" / "vagrant.sh"
CP_IP = "192.168.56.10"  # the Vagrantfile's private network: cp .10, worker N .10+N
# Lines of vagrant.sh's output shown as progress: Vagrant's steps and the provisioning's own
# (its download bars are left in the log).
PROGRESS_PREFIXES = ("==> ", "vagrant.sh:", "vagrant-box:", "libvirt.sh:")
PROVISION_MARKS = ("[node ", "[control-plane ", "[worker ", "[proxy ", "[kubelet-start]", "[addons]")


@dataclass
class VagrantNode:
    """A machine of the Vagrantfile, reached with the SSH settings `vagrant ssh-config` gives."""
    name: str
    """The Node's name (the VM's hostname)."""
    host: str
    """Vagrant's name for the machine (cp, w1)."""
    ip: str
    ssh_config: Path

    def _argv(self, command: str, env: dict[str, str] | None = None) -> list[str]:
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items())
        remote = f"sudo {'env ' + exports if exports else ''} bash -c {shlex.quote(command)}"
        return ["ssh", "-q", "-F", str(self.ssh_config), "-o", "BatchMode=yes", "-o", "ServerAliveInterval=15",
                self.host, remote]

    def follow(self, command: str, into: IO[str]) -> subprocess.Popen[str]:
        """`command` as root, running on (e.g. `journalctl -f`), its output into `into` until it or
        the machine ends: what a machine that powers off said last."""
        return subprocess.Popen(self._argv(command), stdout=into, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                text=True)

    def ssh(self, command: str, timeout: float = 300, check: bool = True,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """`command` as root, as `vagrant ssh -c 'sudo ...'` runs it (Machine.ssh's interface)."""
        argv = self._argv(command, env)
        try:
            result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            if not check:
                return subprocess.CompletedProcess(argv, 124, "", "timed out")
            raise AssertionError(f"{self.host}: `{command}` timed out after {timeout:.0f}s") from None
        if check and result.returncode != 0:
            raise AssertionError(f"{self.host}: `{command}` failed ({result.returncode}):\n"
                                 f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
        return result


def _relay(out: IO[str], log: IO[str]) -> None:
    """vagrant.sh's output into the log, its milestones shown as progress."""
    for line in out:
        log.write(line)
        log.flush()
        text = line.strip()
        if "Progress:" not in text and (text.startswith(PROGRESS_PREFIXES) or any(m in text for m in PROVISION_MARKS)):
            say("vagrant", text[:200])


def vagrant_sh(action: str, log: Path, timeout: float, env: dict[str, str]) -> float:
    """tests/bed/vagrant.sh ACTION with its output in LOG; seconds taken. Raises with the log's tail.
    Out of time, its whole process group goes (a `vagrant up` left running would hold Vagrant's
    lock on the machines, and the `down` that follows could not destroy them)."""
    started = time.monotonic()
    with open(log, "a") as out:
        proc = subprocess.Popen(["bash", str(VAGRANT_SH), action], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, text=True, errors="replace",
                                env={**os.environ, "PYTHON": sys.executable, **env})
        assert proc.stdout is not None
        relay = threading.Thread(target=_relay, args=(proc.stdout, out), daemon=True)
        relay.start()
        try:
            returncode = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            relay.join(10)
            raise AssertionError(f"vagrant.sh {action}: not done after {timeout:.0f}s:\n{log.read_text()[-6000:]}") \
                from None
        relay.join(60)
    if returncode != 0:
        raise AssertionError(f"vagrant.sh {action} failed ({returncode}):\n{log.read_text()[-6000:]}")
    return time.monotonic() - started


@contextlib.contextmanager
def vagrant_cluster(workers: int, proxy_mode: str = "iptables", reuse: bool = False) -> Iterator[Cluster]:
    """`make vagrant-up` with `workers` workers and the proxy in `proxy_mode`, the cluster for the
    block, then `make vagrant-down`. `reuse`: the cluster a `make vagrant-up` left running, left
    running after."""
    env = {"PKL_WORKERS": str(workers), "PKL_PROXY_MODE": proxy_mode}
    work = Path(tempfile.mkdtemp(prefix="pkl-vagrant."))
    log = work / "vagrant.log"
    try:
        if not reuse:
            say("vagrant", f"make vagrant-up: libvirt, the box, the bundle, `vagrant up` of cp and {workers} worker(s) "
                           f"(proxy mode {proxy_mode}; about 8 min a machine under emulation; log {log})")
            took = vagrant_sh("up", log, 1200 + 900 * workers, env)
            say("vagrant", f"vagrant-up took {took:.0f} s")
        config = work / "ssh-config"
        config.write_text(subprocess.run(["vagrant", "ssh-config"], cwd=REPO / "vagrant", capture_output=True,
                                         text=True, check=True, timeout=300, env={**os.environ, **env}).stdout)
        nodes = [VagrantNode(f"pkl-w{i}", f"w{i}", f"192.168.56.{10 + i}", config) for i in range(1, workers + 1)]
        yield Cluster(VagrantNode("pkl-cp", "cp", CP_IP, config), nodes[0] if nodes else None)
    finally:
        try:
            if not reuse:
                say("vagrant", "make vagrant-down: vagrant destroy -f, libvirt stopped")
                vagrant_sh("down", log, 900, env)
        finally:
            subprocess.run(["rm", "-rf", str(work)], check=False)
