"""The conformance run's machine: its own control plane, its own containerd and one worker node,
pykubelet or the real kubelet, beside whatever else runs on this machine.

Nothing here is shared with the default test cluster or the main containerd: the control plane
has its own state dir, ports and pod range (cluster.sh's PYKUBELET_* variables), the node its own
containerd (containerd-node.sh), root dir, pod log dir, bridge, CNI socket and kubelet API
ports. The node agent runs in this machine's network namespace, as a kubelet does, so the
apiserver reaches its API on the machine's address and its probes reach its pods.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from typing import Any, Iterator

import yaml

from pykubelet.cri import errors as cri_errors
from pykubelet.cri.client import CRIClient
from pykubelet.network import assets
from pykubelet.tools.leaks import Node as LeakNode, account, report as leak_report
from tests.conformance import owned
from tests.conformance.owned import BRIDGE, CLUSTER_ENV, CONTAINERD, NODE_CGROUP_ROOT, STATE, WORK, say
from tests.helpers import run_to_completion, unmount_under, wait_for
from tests.runtime.conftest import free_port

REPO = pathlib.Path(__file__).resolve().parents[2]
BED = REPO / "tests" / "bed"
CACHE = pathlib.Path(os.environ.get("PYKUBELET_CACHE", "/var/cache/pykubelet"))
K8S_BIN = CACHE / "k8s" / "v1.36.3" / "bin"
E2E_BIN = CACHE / "e2e" / "v1.36.3" / "bin"
LOCK = pathlib.Path("/tmp/pkl-conformance.lock")  # one conformance run at a time on a machine
ENDPOINT = f"unix://{STATE}/containerd.sock"
ADMIN = WORK / "cluster" / "admin.kubeconfig"
DEVICE_PLUGINS = pathlib.Path("/var/lib/kubelet/device-plugins")  # the kubelet's, whatever its root dir
KUBELET_PORT = 10250


def sh(*argv: str, env: dict[str, str] | None = None, timeout: float = 3600, quiet: bool = False) -> str:
    """Run a command; its stdout. Its stderr streams through (progress of builds), unless quiet."""
    result = subprocess.run(argv, env={**os.environ, **(env or {})}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE if quiet else None, text=True, timeout=timeout)
    if result.returncode != 0:
        detail = (result.stderr or "")[-3000:] if quiet else ""
        raise RuntimeError(f"{' '.join(argv)} failed (exit {result.returncode}) {detail}")
    return result.stdout


def cluster_sh(*args: str, timeout: float = 3600) -> str:
    return sh("bash", str(BED / "cluster.sh"), *args, env=CLUSTER_ENV, timeout=timeout)


def kubectl(*args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(K8S_BIN / "kubectl"), "--kubeconfig", str(ADMIN), *args], capture_output=True,
                            text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {result.stderr.strip()}")
    return result


def node_object(name: str) -> dict[str, Any]:
    result = kubectl("get", "node", name, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else {}


def node_ip() -> str:
    """The machine's address on its default route: the node's InternalIP, as a kubelet picks it."""
    routes = json.loads(sh("ip", "-j", "-4", "route", "get", "1.1.1.1", quiet=True))
    return routes[0]["prefsrc"]


def kubelet_port() -> int:
    """10250, the kubelet API's port, as a real node has it (some specs reach the node through the
    apiserver's proxy at that port); another free port if something else here holds it."""
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", KUBELET_PORT))
            return KUBELET_PORT
        except OSError:
            pass
    port = free_port()
    say(f"WARNING: port {KUBELET_PORT} is taken on this machine; the node's kubelet API listens on {port}")
    return port


def build() -> None:
    """The control plane and the suite (cached after the first time), then the images."""
    sh("bash", str(BED / "build-control-plane.sh"))
    sh("bash", str(BED / "build-conformance.sh"))


@contextlib.contextmanager
def exclusive(path: pathlib.Path = LOCK, what: str = "conformance run") -> Iterator[None]:
    """One run at a time on the machine: the next waits, saying so."""
    with open(path, "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"another {what} holds {path}; waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@dataclass
class Node:
    """One worker: containerd-node.sh's containerd and a node agent joined to the run's cluster."""

    kind: str  # "pykubelet" | "kubelet"
    results: pathlib.Path
    name: str = ""
    proc: subprocess.Popen[bytes] | None = None

    def __post_init__(self) -> None:
        self.name = self.name or f"{self.kind}-conformance"
        self.dir = WORK / self.kind
        self.log_path = self.results / f"{self.kind}.log"

    # ---------------------------------------------------------------- start
    def start(self) -> None:
        self._clean_dir()
        (self.dir / "manifests").mkdir(parents=True)
        say(f"containerd for the node: {ENDPOINT}")
        sh("bash", str(BED / "containerd-node.sh"), "up", CONTAINERD, quiet=True)
        say("importing the e2e test images into it")
        for line in sh(sys.executable, str(BED / "images_e2e.py"),
                       env={"CONTAINERD_ADDRESS": str(STATE / "containerd.sock")}).splitlines():
            say(f"  {line}")
        kubeconfig = self.dir / "node.kubeconfig"
        cluster_sh("node-kubeconfig", self.name, str(kubeconfig), timeout=60)
        argv = self._kubelet_argv(kubeconfig) if self.kind == "kubelet" else self._pykubelet_argv(kubeconfig)
        say(f"starting {self.kind} as node {self.name} (log: {self.log_path})")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        if self.kind == "kubelet":  # containerd runs the pod network; the kubelet only tells it the podCIDR
            cidr = run_to_completion(wait_for(lambda: node_object(self.name).get("spec", {}).get("podCIDR"), 120,
                                              f"node {self.name}'s podCIDR", interval=1, describe=self.describe))
            assets.write_conflist(str(STATE / "net.d"), assets.render(
                "pod-network.conflist", bridge=BRIDGE, pod_cidr=cidr, ipam_dir=str(self.dir / "ipam")))
        run_to_completion(wait_for(self._ready, 180, f"node {self.name} Ready without taints", interval=1,
                                   describe=self.describe))
        say(f"node {self.name} is Ready")

    def _pykubelet_argv(self, kubeconfig: pathlib.Path) -> list[str]:
        return [sys.executable, "-m", "pykubelet.cli", "--kubeconfig", str(kubeconfig),
                "--client-ca-file", str(WORK / "cluster" / "pki" / "ca.crt"),
                "--container-runtime-endpoint", ENDPOINT, "--root-dir", str(self.dir / "root"),
                "--pod-manifest-path", str(self.dir / "manifests"), "--pod-logs-dir", str(self.dir / "pod-logs"),
                "--hostname-override", self.name, "--node-ip", node_ip(),
                "--port", str(kubelet_port()), "--healthz-port", str(free_port()),
                "--cgroup-root", NODE_CGROUP_ROOT,
                "--network-mode", "agent", "--cni-bridge", BRIDGE, "--cni-conf-dir", str(STATE / "net.d"),
                "--cni-socket", str(STATE / "cni.sock")]

    def _kubelet_argv(self, kubeconfig: pathlib.Path) -> list[str]:
        owned.make_cgroup_root(NODE_CGROUP_ROOT)
        owned.note_what_the_kubelet_will_make([str(DEVICE_PLUGINS)])
        config = self.dir / "kubelet.yaml"
        config.write_text(yaml.safe_dump({
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "cgroupDriver": "cgroupfs", "cgroupRoot": NODE_CGROUP_ROOT, "failSwapOn": False,
            "failCgroupV1": False, "staticPodPath": str(self.dir / "manifests"),
            "containerRuntimeEndpoint": ENDPOINT, "podLogsDir": str(self.dir / "pod-logs"),
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                               "x509": {"clientCAFile": str(WORK / "cluster" / "pki" / "ca.crt")}},
            "authorization": {"mode": "Webhook"}, "port": kubelet_port(), "healthzPort": free_port(),
            "readOnlyPort": 0}))
        return [str(K8S_BIN / "kubelet"), "--config", str(config), "--kubeconfig", str(kubeconfig),
                "--root-dir", str(self.dir / "root"), "--cert-dir", str(self.dir / "root" / "pki"),
                "--hostname-override", self.name, "--node-ip", node_ip()]

    def _ready(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"{self.kind} exited with {self.proc.returncode}:\n{self.describe()}")
        node = node_object(self.name)
        conditions = {c["type"]: c["status"] for c in node.get("status", {}).get("conditions", [])}
        return conditions.get("Ready") == "True" and not node.get("spec", {}).get("taints")

    def describe(self) -> str:
        try:
            return "--- agent log ---\n" + "\n".join(self.log_path.read_text(errors="replace").splitlines()[-40:])
        except OSError:
            return ""

    # ---------------------------------------------------------------- stop
    def stop(self) -> None:
        """Drain the node through the API, stop the agent and its containerd, and remove what
        they made on this machine."""
        if self.proc is not None and self.proc.poll() is None:
            self._drain()
            # While the agent still answers its CNI shim: a pod containerd keeps (one the API
            # forgot, or the kubelet's exited ones) goes with its network namespace.
            run_to_completion(self._remove_runtime_pods())
            if self.kind == "pykubelet":
                self._report_leaks()
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        owned.remove_node_host_state()
        self._clean_dir()

    def _drain(self) -> None:
        kubectl("delete", "pods", "--all-namespaces", "--field-selector", f"spec.nodeName={self.name}",
                "--grace-period=1", "--wait=false", check=False)

        def no_pods() -> bool:
            out = kubectl("get", "pods", "--all-namespaces", "--field-selector", f"spec.nodeName={self.name}",
                          "-o", "name", check=False).stdout
            return not out.strip()
        try:
            run_to_completion(wait_for(no_pods, 180, f"node {self.name} to remove its pods", interval=1))
        except AssertionError as e:
            say(f"WARNING: {e}")

    async def _remove_runtime_pods(self) -> None:
        cri = CRIClient(ENDPOINT)
        try:
            for container in await cri.list_containers():
                await cri.stop_container(container.id, 0)
                await cri.remove_container(container.id)
            for sandbox in await cri.list_pod_sandbox():
                await cri.stop_pod_sandbox(sandbox.id)
                await cri.remove_pod_sandbox(sandbox.id)
        except cri_errors.CRIError as e:
            say(f"WARNING: could not remove the node's remaining pods: {e}")
        finally:
            await cri.close()

    def _report_leaks(self) -> None:
        """What the drained node still holds for pods that are gone (`pykubelet leaks`): said,
        since everything goes with its containerd anyway."""
        node = LeakNode(endpoints=[ENDPOINT], root_dirs=[str(self.dir / "root")],
                        pod_logs_dir=str(self.dir / "pod-logs"))
        leaks = run_to_completion(account(node, expect_no_pods=True))
        if leaks:
            say(f"WARNING: after draining, the node still holds:\n{leak_report(leaks)}")

    def _clean_dir(self) -> None:
        if self.dir.exists():
            unmount_under(str(self.dir))
            shutil.rmtree(self.dir, ignore_errors=True)


@contextlib.contextmanager
def control_plane() -> Iterator[None]:
    say(f"control plane on 127.0.0.1:{CLUSTER_ENV['PYKUBELET_API_PORT']} (state {WORK / 'cluster'})")
    try:
        cluster_sh("up")
        yield
    finally:
        cluster_sh("down", "--purge", timeout=300)
        shutil.rmtree(WORK / "cluster", ignore_errors=True)
        with contextlib.suppress(OSError):
            WORK.rmdir()  # made by this run, unless it holds something else
