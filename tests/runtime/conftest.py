"""Runtime tests: a real pykubelet process against the real containerd started by `make setup`."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
from typing import Any

import pytest
import yaml

from pykubelet.cri import errors
from pykubelet.cri.client import CRIClient
from pykubelet.runtime import cgroups, labels
from pykubelet.util import unix_http
from tests.helpers import unmount_under, wait_for

ENDPOINT = os.environ.get("PYKUBELET_TEST_ENDPOINT", "unix:///run/containerd/containerd.sock")
# A second run (own containerd, own node name) can share the machine with the first.
NODE = os.environ.get("PYKUBELET_TEST_NODE", "pkltest")
BUSYBOX = "docker.io/library/busybox:1.36"
SHARED_NETWORK_STATE = pathlib.Path("/var/lib/pykubelet-test") / NODE / "network"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pod_manifest(name: str, command: list[str] | str, *, restart_policy: str | None = None,
                 grace: int | None = 1, image: str = BUSYBOX, **container: Any) -> dict[str, Any]:
    """A one-container busybox Pod; a string command runs under sh -c."""
    if isinstance(command, str):
        command = ["sh", "-c", command]
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": image, "command": command, **container}]}
    if restart_policy:
        spec["restartPolicy"] = restart_policy
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def write_manifest(directory: pathlib.Path, name: str, manifest: dict[str, Any] | str) -> pathlib.Path:
    """Write atomically (hidden temp file, then rename), as a careful user or tool would."""
    text = manifest if isinstance(manifest, str) else yaml.safe_dump(manifest)
    path = directory / f"{name}.yaml"
    tmp = directory / f".{name}.yaml.tmp"
    tmp.write_text(text)
    tmp.rename(path)
    return path


# When the last agent of this session stopped: everything it posted is from before then.
_last_agent_stop = 0.0


def _a_second_no_agent_stopped_in() -> float:
    """Now, moved past the second in which the last agent stopped. The Node's heartbeats have whole
    seconds, so only then does a heartbeat in this start's second or later tell that this run posted
    it (tests/cluster's wait_ready): a restart in the same second would otherwise be indistinguishable
    from the previous run's last post."""
    now = time.time()
    if int(now) == int(_last_agent_stop):
        time.sleep(int(now) + 1 - now)  # a clock boundary, at most a second away, not a guess
        now = time.time()
    return now


class AgentProcess:
    """pykubelet run as a user runs it, in its own session so signals reach only it."""

    def __init__(self, workdir: pathlib.Path, manifests: pathlib.Path, *extra: str, node: str = NODE,
                 endpoint: str = ENDPOINT, network_state: pathlib.Path | None = SHARED_NETWORK_STATE):
        self.workdir = workdir
        if network_state is not None:
            # Each test has its own root dir, but the agents of one node share their network
            # state, as successive agents on a real node do: pods a test's teardown removed
            # while no agent ran are released by the next agent (IPs, portmap rules).
            network_state.mkdir(parents=True, exist_ok=True)
            (workdir / "root").mkdir(parents=True, exist_ok=True)
            if not (workdir / "root" / "network").exists():
                (workdir / "root" / "network").symlink_to(network_state)
        self.node = node
        self.endpoint = endpoint
        self.extra = extra  # flags every start of this agent gets
        self.manifests = manifests
        self.logs_dir = workdir / "logs"
        self.port = free_port()
        self.api_port = free_port()  # the kubelet API: several agents share the machine
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / "agent.log"
        self.runs = 0
        self.last_extra: tuple[str, ...] = ()

    def start(self, *extra: str) -> "AgentProcess":
        self.runs += 1
        self.last_extra = extra
        self.started_at = _a_second_no_agent_stopped_in()
        log = open(self.log_path, "ab")
        log.write(f"--- agent run {self.runs} ---\n".encode())
        log.flush()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pykubelet.cli", "--pod-manifest-path", str(self.manifests),
             "--root-dir", str(self.workdir / "root"), "--pod-logs-dir", str(self.logs_dir),
             "--hostname-override", self.node, "--healthz-port", str(self.port), "--port", str(self.api_port),
             "--container-runtime-endpoint", self.endpoint,
             # the machine's images are shared by every tier and cannot be pulled again here: no
             # agent of a test collects them unless the test asks for it (a later flag)
             "--image-gc-high-threshold=100", *self.extra, *extra],  # later flags win
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        return self

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15) -> int:
        global _last_agent_stop
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(timeout=timeout)
        _last_agent_stop = time.time()
        return code

    def shutdown(self) -> None:
        """Stop it if it still runs: SIGTERM, then SIGKILL if it hangs."""
        if self.proc and self.proc.poll() is None:
            try:
                self.stop(timeout=15)
            except subprocess.TimeoutExpired:
                self.stop(signal.SIGKILL)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    @property
    def socket(self) -> str:
        """The agent's root-only socket for /pods and /debug, in its --root-dir (later flags win)."""
        flags = ["--root-dir", str(self.workdir / "root"), *self.extra, *self.last_extra]
        root = [value for flag, value in zip(flags, flags[1:]) if flag == "--root-dir"][-1]
        return unix_http.agent_socket(root)

    def local_get(self, path: str) -> Any:
        """The JSON the agent serves at path on its socket; None while it does not answer 200."""
        try:
            code, body = unix_http.get(self.socket, path, timeout=2)
        except OSError:
            return None
        return json.loads(body) if code == 200 else None

    def pods(self) -> dict[str, dict[str, Any]] | None:
        """name -> pod (with status) from the agent's /pods; None while it does not answer."""
        pod_list = self.local_get("/pods")
        return None if pod_list is None else {p["metadata"]["name"]: p for p in pod_list["items"]}

    def working_pods(self) -> int | None:
        """How many pods have a pod worker in the agent (/debug/agent): each is synced or terminated
        by one, which ends when the pod is gone."""
        agent = self.local_get("/debug/agent")
        return None if agent is None else int(agent["pods"])

    async def wait_pod(self, name: str, condition, timeout: float, what: str) -> dict[str, Any]:
        """Wait until the pod `name` (node-qualified) is listed and condition(pod) holds."""
        def check():
            pod = (self.pods() or {}).get(name)
            return pod if pod is not None and condition(pod) else None
        return await wait_for(check, timeout, f"pod {name}: {what}", describe=self.describe)

    def describe(self) -> str:
        return f"--- /pods ---\n{json.dumps(self.pods(), indent=1)[:4000]}\n--- agent log ---\n{self.log()[-6000:]}"


def phase(pod: dict[str, Any]) -> str:
    return pod["status"].get("phase", "")


def main_status(pod: dict[str, Any]) -> dict[str, Any]:
    return pod["status"]["containerStatuses"][0]


def is_test_pod(name: str, namespace: str) -> bool:
    """Static test pods end in -<node>; cluster tests put their pods in t-* namespaces."""
    return name.endswith(f"-{NODE}") or namespace.startswith("t-")


async def remove_test_pods(cri: CRIClient) -> None:
    """Remove every sandbox and container the tests left behind (a failed test's leftovers).

    A container an agent was starting when it stopped stays "starting" in containerd for a
    moment and cannot be removed yet: try again until a deadline.
    """
    async def removed() -> bool:
        try:
            await _remove_test_pods_once(cri)
            return True
        except errors.CRIError:
            return False
    await wait_for(removed, 30, "the tests' leftover pods to be removable", interval=0.5)


async def _remove_test_pods_once(cri: CRIClient) -> None:
    for c in await cri.list_containers():
        if is_test_pod(c.labels.get(labels.POD_NAME, ""), c.labels.get(labels.POD_NAMESPACE, "")):
            await cri.stop_container(c.id, 0)
            await cri.remove_container(c.id)
    for s in await cri.list_pod_sandbox():
        if is_test_pod(s.metadata.name, s.metadata.namespace):
            await cri.stop_pod_sandbox(s.id)
            await cri.remove_pod_sandbox(s.id)
            cgroups.remove_pod_cgroups(s.metadata.uid)  # the agent's job, but it is gone by now


@pytest.fixture
async def cri():
    client = CRIClient(ENDPOINT)
    try:
        await client.version()
    except errors.CRIError as e:
        pytest.fail(f"containerd is not answering at {ENDPOINT} ({e}); run `make setup` first")
    await remove_test_pods(client)
    yield client
    await remove_test_pods(client)
    await client.close()


@pytest.fixture
def manifests(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "manifests"
    path.mkdir()
    return path


@pytest.fixture
async def agent(cri, tmp_path: pathlib.Path, manifests: pathlib.Path):
    """A started agent on an empty manifests dir; stopped (SIGKILL if it hangs) afterwards."""
    process = AgentProcess(tmp_path, manifests).start()
    await wait_for(lambda: process.pods() is not None, 20, "the agent's /pods to answer",
                   describe=process.describe)
    yield process
    process.shutdown()
    unmount_under(str(tmp_path))  # memory emptyDirs, downwardAPI volumes of pods left running
    if os.environ.get("PYKUBELET_TEST_SHOW_LOG"):
        print(process.log())


async def containers_of(cri: CRIClient, pod_name: str) -> list:
    return [c for c in await cri.list_containers({labels.POD_NAME: pod_name})]


async def sandboxes_of(cri: CRIClient, pod_name: str) -> list:
    return [s for s in await cri.list_pod_sandbox({labels.POD_NAME: pod_name})]

