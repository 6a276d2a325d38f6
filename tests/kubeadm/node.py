"""A machine for kubeadm, inside this one: what `kubeadm init` and `kubeadm join` see as a node.

kubeadm writes machine-wide paths (/etc/kubernetes, /var/lib/kubelet, /var/lib/etcd, /etc/default)
and wants ports 6443, 2379-2380, 10248-10259 free, which the cluster tier and other agents on this
machine use too. So each kubeadm node is
- a network namespace with eth0 on a LAN of its own (a bridge in one more namespace), where its
  control plane, containerd and kubelet listen;
- a mount namespace in which /etc, /var/lib, /var/log and /opt are overlays (writes land in the
  node's state dir, the machine's files stay as they are), /var/lib/pykubelet-nodes is the real one
  (containerd's snapshots need a real filesystem), /run/containerd is the node's own containerd
  (tests/bed/containerd-node.sh), /run/pykubelet its own, and /run/flannel a tmpfs of its own:
  what a CNI DaemonSet writes through hostPath (/etc/cni/net.d, /opt/cni/bin, /run/flannel) is
  each node's, as on separate machines (/etc/cni/net.d starts empty, as on a new one);
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
NODES_REAL = Path("/var/lib/pykubelet-nodes")  # containerd-node.sh's roots (real filesystem, not overlaid)
OVERLAID = ("/etc", "/var/lib", "/var/log", "/opt")
# Paths under the machine's /run that the nodes' DaemonSets use through hostPath: a per-node tmpfs,
# mounted on a directory lan_up makes (and lan_down removes) in the machine's /run.
PRIVATE_RUN_DIRS = ("/run/flannel",)
# Starts empty on every node, as on a new machine (not with what the machine's own agents wrote).
EMPTY_DIRS = ("/etc/cni/net.d",)
# A hostPath of type FileOrCreate (kube-proxy's and flannel's iptables lock): shared by the nodes,
# as a lock may be; removed by lan_down if the tier made it.
SHARED_RUN_FILES = ("/run/xtables.lock",)
CNI_BIN_DIR = "/opt/cni/bin"  # where CNI DaemonSets install their plugins (containerd's default)

@dataclass(frozen=True)
class Lan:
    """The network a set of nodes shares, and where their state lives on the machine: two sets on
    different LANs (the kubeadm tier's and a conformance cluster) run side by side."""

    namespace: str  # the network namespace that holds the bridge
    bridge: str
    subnet: str  # the /24's first three octets; node i is .(10 + i)
    state_root: Path  # the nodes' state dirs; its name starts with STATE_PREFIX


STATE_PREFIX = "pkl-kubeadm"  # every LAN's state root is /run/<STATE_PREFIX>...: how lan_down sees the others
KUBEADM_LAN = Lan("pkl-klan", "klan0", "10.251.0", Path("/run") / STATE_PREFIX)
LABEL_ARG = "--node-labels=pykubelet.test/extra-args=yes"  # an admin's flag in /etc/default/kubelet, to see it applied
PYKUBELET = f"#!/bin/sh\nexec {sys.executable} -m pykubelet.cli \"$@\"\n"


def run(*argv: str, timeout: float = 120, check: bool = True, **kwargs) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kwargs)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed ({result.returncode}):\n{result.stdout[-3000:]}\n"
                             f"{result.stderr[-3000:]}")
    return result


def _other_lans_markers(lan: Lan) -> list[Path]:
    return sorted(p / "made-on-the-machine" for p in Path("/run").glob(f"{STATE_PREFIX}*")
                  if p != lan.state_root and (p / "made-on-the-machine").exists())


def lan_up(lan: Lan = KUBEADM_LAN) -> None:
    made = lan.state_root / "made-on-the-machine"
    if not made.exists():
        lan.state_root.mkdir(parents=True, exist_ok=True)
        ours = [p for p in (*PRIVATE_RUN_DIRS, *SHARED_RUN_FILES) if not Path(p).exists()]
        # The machine's paths are the mount points of every LAN's nodes: removing one takes it from
        # the nodes of the LANs still up. So the LAN up last holds the list of what to remove, and
        # hands it on when it goes down first (lan_down).
        for other in _other_lans_markers(lan):
            ours += other.read_text().split()
            other.write_text("")
        made.write_text("".join(f"{p}\n" for p in ours))
        for path in PRIVATE_RUN_DIRS:
            Path(path).mkdir(exist_ok=True)
    if not Path("/var/run/netns", lan.namespace).exists():
        run("ip", "netns", "add", lan.namespace)
        run("ip", "-n", lan.namespace, "link", "add", lan.bridge, "type", "bridge")
        run("ip", "-n", lan.namespace, "link", "set", lan.bridge, "up")


def lan_down(lan: Lan = KUBEADM_LAN) -> None:
    run("ip", "netns", "del", lan.namespace, check=False)
    made = lan.state_root / "made-on-the-machine"
    if made.exists():
        others = _other_lans_markers(lan)
        if others:  # a LAN still up: the last one down removes the machine's paths (see lan_up)
            with open(others[0], "a") as theirs:
                theirs.write(made.read_text())
        else:
            for path in made.read_text().split():
                if Path(path).is_dir():  # what a pod wrote to it (not to its node's mount) goes too
                    shutil.rmtree(path, ignore_errors=True)
                elif Path(path).exists():
                    Path(path).unlink()
        made.unlink()
    try:
        lan.state_root.rmdir()  # the nodes' state dirs are gone by now
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
    extra_args: str = f"{LABEL_ARG} --network-mode=runtime"
    """KUBELET_EXTRA_ARGS in /etc/default/kubelet: the admin's own flags (a label, to see them
    applied; pykubelet's network mode: the cluster's CNI is flannel's DaemonSet)."""
    lan: Lan = KUBEADM_LAN
    holder: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    pod_uids: set[str] = field(default_factory=set)
    """UIDs of the pods the node ran (their cgroups are removed with the node)."""

    @property
    def ip(self) -> str:
        return f"{self.lan.subnet}.{10 + self.index}"

    @property
    def state(self) -> Path:
        """Host-visible: the overlays' upper dirs, the node's bin dir, the init system's files."""
        return self.lan.state_root / self.name

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
        lan_up(self.lan)
        run("ip", "netns", "add", self.name)
        port = f"k-{self.name}"[:15]
        run("ip", "link", "add", port, "netns", self.lan.namespace, "type", "veth", "peer", "name", "eth0",
            "netns", self.name)
        run("ip", "-n", self.lan.namespace, "link", "set", port, "master", self.lan.bridge, "up")
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
        # Debian's CNI plugins where CNI DaemonSets expect them, as an admin links them on Debian
        self.sh("sh", "-c", f"mkdir -p {CNI_BIN_DIR} && ln -sf /usr/lib/cni/* {CNI_BIN_DIR}/")
        self.sh("bash", str(BED / "containerd-node.sh"), "up", self.name, "--cni-conf-dir", "/etc/cni/net.d",
                "--cni-bin-dir", CNI_BIN_DIR, timeout=300)
        # the admin's own file, as the kubelet package installs it
        self.sh("sh", "-c", f"mkdir -p /etc/default && echo 'KUBELET_EXTRA_ARGS={self.extra_args}' > /etc/default/kubelet")
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
                  *(f"mount -t tmpfs -o mode=0755 tmpfs {path}" for path in PRIVATE_RUN_DIRS),
                  *(f"mkdir -p {path} && mount -t tmpfs -o mode=0755 tmpfs {path}" for path in EMPTY_DIRS),
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
