"""A machine for kubeadm, inside this one: what `kubeadm init` and `kubeadm join` see as a node.

kubeadm writes machine-wide paths (/etc/kubernetes, /var/lib/kubelet, /var/lib/etcd, /etc/default)
and wants ports 6443, 2379-2380, 10248-10259 free, which the cluster tier and other agents on this
machine use too. So each kubeadm node is
- a network namespace with eth0 on a LAN of its own (a bridge in one more namespace), where its
  control plane, containerd and kubelet listen;
- a mount namespace in which /etc, /var/lib and /var/log are overlays (writes land in the node's
  state dir, the machine's files stay as they are), /var/lib/pykubelet-nodes is the real one
  (containerd's snapshots need a real filesystem), /run/containerd is the node's own containerd
  (tests/bed/containerd-node.sh) and /run/pykubelet its own;
- a PATH whose `kubelet` is the agent under test and whose `systemctl` is tests/kubeadm/initsystem.py.
Everything kubeadm, containerd and the kubelet do happens in there; `down` leaves the machine as
it was (the namespaces, overlays and state dirs go).
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization

REPO = Path(__file__).resolve().parents[2]
BED = REPO / "tests" / "bed"
K8S_BIN = Path(os.environ.get("PYKUBELET_CACHE", "/var/cache/pykubelet")) / "k8s" / "v1.36.3" / "bin"
STATE_ROOT = Path("/run/pkl-kubeadm")
NODES_REAL = Path("/var/lib/pykubelet-nodes")  # containerd-node.sh's roots (real filesystem, not overlaid)
OVERLAID = ("/etc", "/var/lib", "/var/log")
LAN_NS = "pkl-klan"
LAN_BRIDGE = "klan0"
SUBNET = "10.251.0"
PYKUBELET = f"#!/bin/sh\nexec {sys.executable} -m pykubelet.cli \"$@\"\n"


def run(*argv: str, timeout: float = 120, check: bool = True, **kwargs) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kwargs)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed ({result.returncode}):\n{result.stdout[-3000:]}\n"
                             f"{result.stderr[-3000:]}")
    return result


def lan_up() -> None:
    if not Path("/var/run/netns", LAN_NS).exists():
        run("ip", "netns", "add", LAN_NS)
        run("ip", "-n", LAN_NS, "link", "add", LAN_BRIDGE, "type", "bridge")
        run("ip", "-n", LAN_NS, "link", "set", LAN_BRIDGE, "up")


def lan_down() -> None:
    run("ip", "netns", "del", LAN_NS, check=False)
    try:
        STATE_ROOT.rmdir()  # the nodes' state dirs are gone by now
    except OSError:
        pass


def ca_cert_hash(ca_pem: bytes) -> str:
    """kubeadm's --discovery-token-ca-cert-hash: SHA-256 of the CA's SubjectPublicKeyInfo."""
    spki = x509.load_pem_x509_certificate(ca_pem).public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return "sha256:" + hashlib.sha256(spki).hexdigest()


@dataclass
class KubeadmNode:
    name: str
    index: int
    kubelet: str = PYKUBELET
    """The node's `kubelet` program (a shell script): pykubelet, or the real kubelet."""
    holder: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    pod_uids: set[str] = field(default_factory=set)
    """UIDs of the pods the node ran (their cgroups are removed with the node)."""

    @property
    def ip(self) -> str:
        return f"{SUBNET}.{10 + self.index}"

    @property
    def state(self) -> Path:
        """Host-visible: the overlays' upper dirs, the node's bin dir, the init system's files."""
        return STATE_ROOT / self.name

    @property
    def endpoint(self) -> str:
        return f"unix:///run/pykubelet-nodes/{self.name}/containerd.sock"

    @property
    def init_dir(self) -> Path:
        return self.state / "init"

    def kubelet_log(self) -> str:
        try:
            return (self.init_dir / "kubelet.log").read_text(errors="replace")
        except FileNotFoundError:
            return ""

    # --- life
    def up(self) -> "KubeadmNode":
        self.down()  # what a killed earlier run left
        lan_up()
        run("ip", "netns", "add", self.name)
        port = f"k-{self.name}"[:15]
        run("ip", "link", "add", port, "netns", LAN_NS, "type", "veth", "peer", "name", "eth0", "netns", self.name)
        run("ip", "-n", LAN_NS, "link", "set", port, "master", LAN_BRIDGE, "up")
        run("ip", "-n", self.name, "addr", "add", f"{self.ip}/24", "dev", "eth0")
        run("ip", "-n", self.name, "link", "set", "eth0", "up")
        run("ip", "-n", self.name, "link", "set", "lo", "up")
        # kubeadm and the kubelet look for a default route to pick the node's address
        run("ip", "-n", self.name, "route", "add", "default", "dev", "eth0")
        self._mount_namespace()
        bin_dir = self.state / "bin"
        bin_dir.mkdir(parents=True)
        (bin_dir / "kubelet").write_text(self.kubelet)
        (bin_dir / "systemctl").write_text(f"#!/bin/sh\nexec {sys.executable} {REPO}/tests/kubeadm/initsystem.py \"$@\"\n")
        for tool in ("kubelet", "systemctl"):
            (bin_dir / tool).chmod(0o755)
        for tool in ("kubeadm", "kubectl"):
            (bin_dir / tool).symlink_to(K8S_BIN / tool)
        self.sh("bash", str(BED / "containerd-node.sh"), "up", self.name, "--cni-conf-dir", "/etc/cni/net.d",
                timeout=300)
        # the admin's own file, as the kubelet package installs it (and a flag of ours, to see it applied)
        self.sh("sh", "-c", "mkdir -p /etc/default && echo 'KUBELET_EXTRA_ARGS=--node-labels="
                            "pykubelet.test/extra-args=yes' > /etc/default/kubelet")
        return self

    def _mount_namespace(self) -> None:
        s = self.state
        setup = ["set -e"]
        NODES_REAL.mkdir(parents=True, exist_ok=True)
        (s / "real-nodes").mkdir(parents=True)
        setup.append(f"mount --bind {NODES_REAL} {s}/real-nodes")
        for path in OVERLAID:
            key = path.strip("/").replace("/", "-")
            for part in ("upper", "work"):
                (s / f"{key}.{part}").mkdir()
            setup.append(f"mount -t overlay overlay -o lowerdir={path},upperdir={s}/{key}.upper,"
                         f"workdir={s}/{key}.work {path}")
        node_run = Path("/run/pykubelet-nodes") / self.name
        node_run.mkdir(parents=True, exist_ok=True)
        (s / "run-pykubelet").mkdir()
        setup += [f"mount --bind {s}/real-nodes {NODES_REAL}",
                  f"mkdir -p /run/containerd /run/pykubelet && mount --bind {node_run} /run/containerd",
                  f"mount --bind {s}/run-pykubelet /run/pykubelet",
                  f"touch {s}/ready", "exec sleep infinity"]
        # The holder keeps the namespace: nsenter and unshare exec into sh, which execs sleep, so its
        # PID is in both of the node's namespaces. (Not `ip netns exec`: it remounts /sys for the
        # netns, and the cgroup hierarchies under /sys/fs/cgroup, which runc needs, go with it.)
        self.holder = subprocess.Popen(
            ["nsenter", f"--net=/var/run/netns/{self.name}", "unshare", "--mount", "--propagation", "slave",
             "sh", "-c", "\n".join(setup)], start_new_session=True, stdin=subprocess.DEVNULL,
            stdout=open(s / "holder.log", "wb"), stderr=subprocess.STDOUT)
        (s / "holder.pid").write_text(str(self.holder.pid))
        deadline = time.monotonic() + 20
        while not (s / "ready").exists():
            if self.holder.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"node {self.name}: mount namespace setup failed: "
                                     f"{(s / 'holder.log').read_text()}")
            time.sleep(0.05)

    def _ns_pid(self) -> int:
        """The holder's PID: it is in both of the node's namespaces."""
        try:
            pid = int((self.state / "holder.pid").read_text())
        except FileNotFoundError:
            raise AssertionError(f"node {self.name} is not up") from None
        if not Path(f"/proc/{pid}/ns/mnt").exists():
            raise AssertionError(f"node {self.name}: its namespace holder (pid {pid}) is gone")
        return pid

    def env(self) -> dict[str, str]:
        return {"PATH": f"{self.state / 'bin'}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "HOME": "/root", "PKL_INIT_DIR": str(self.init_dir), "KUBECONFIG": "/etc/kubernetes/admin.conf",
                "CONTAINERD_ADDRESS": f"/run/pykubelet-nodes/{self.name}/containerd.sock"}

    def sh(self, *argv: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
        """argv run on the node: its mount and network namespaces, its PATH."""
        pid = self._ns_pid()
        return run("nsenter", f"--mount=/proc/{pid}/ns/mnt", f"--net=/proc/{pid}/ns/net", "--", *argv,
                   timeout=timeout, check=check, env=self.env(), cwd="/")

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.sh("kubectl", "--request-timeout=20s", *args, check=check, timeout=60)

    def read(self, path: str) -> bytes:
        return base64.b64decode(self.sh("base64", "-w0", path).stdout)

    def exists(self, path: str) -> bool:
        return self.sh("test", "-e", path, check=False).returncode == 0

    def down(self) -> None:
        """Stop everything of the node and remove it; safe to call on a half-made node."""
        s = self.state
        if (s / "holder.pid").exists():
            try:
                self.sh("systemctl", "stop", "kubelet", check=False, timeout=120)
                self.sh("bash", str(BED / "containerd-node.sh"), "down", self.name, check=False, timeout=180)
            except (AssertionError, subprocess.TimeoutExpired):
                pass
            for name in ("init/kubelet", "init/supervisor", "holder"):
                _kill(s / f"{name}.pid")
        run("bash", str(BED / "containerd-node.sh"), "down", self.name, check=False, timeout=180)
        run("ip", "netns", "del", self.name, check=False)
        if s.exists():
            shutil.rmtree(s, ignore_errors=True)


def _kill(pid_file: Path) -> None:
    """SIGTERM the process in pid_file, SIGKILL it after 5 s."""
    try:
        pid = int(pid_file.read_text())
    except (FileNotFoundError, ValueError):
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        for _ in range(50):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)
