"""Cluster tests: pykubelet joins a real control plane (etcd, kube-apiserver, controller-manager,
scheduler built from the Kubernetes Go modules) with a node identity, as a real node would."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import secrets
import subprocess
from datetime import datetime
from typing import Any, AsyncIterator, Iterator

import pytest
import yaml

from tests.helpers import unmount_under, wait_for
from tests.runtime.conftest import BUSYBOX, ENDPOINT, NODE, AgentProcess, cri  # noqa: F401  (cri: a fixture)

REPO = pathlib.Path(__file__).resolve().parents[2]
CLUSTER_SH = REPO / "tests" / "bed" / "cluster.sh"
STATE = pathlib.Path(os.environ.get("PYKUBELET_CLUSTER_DIR", REPO / ".cluster"))
ADMIN = STATE / "admin.kubeconfig"
KUBECTL = STATE / "bin" / "kubectl"


def cluster_sh(*args: str, timeout: float = 3600) -> None:
    result = subprocess.run(["bash", str(CLUSTER_SH), *args], capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"cluster.sh {' '.join(args)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"


def kubectl(*args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(KUBECTL), "--kubeconfig", str(ADMIN), *args], input=stdin, capture_output=True,
                            text=True, timeout=60)
    if check:
        assert result.returncode == 0, f"kubectl {' '.join(args)} failed: {result.stderr}"
    return result


def kubectl_json(*args: str) -> Any:
    return json.loads(kubectl(*args, "-o", "json").stdout)


def apply(obj: dict[str, Any] | list[dict[str, Any]]) -> None:
    docs = obj if isinstance(obj, list) else [obj]
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))


@contextlib.contextmanager
def control_plane() -> Iterator[pathlib.Path]:
    """The control plane, up for the block (built first if the cache is empty).

    A cluster that was already up (`make cluster`) is left running; one started here is stopped.
    """
    was_up = subprocess.run(["bash", str(CLUSTER_SH), "status"], capture_output=True).returncode == 0
    cluster_sh("up")
    try:
        yield ADMIN
    finally:
        if not was_up:
            cluster_sh("down", timeout=120)


@pytest.fixture(scope="session")
def cluster():
    """The control plane, started once per test session."""
    with control_plane() as admin:
        yield admin


def node_object() -> dict[str, Any] | None:
    result = kubectl("get", "node", NODE, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def node_condition(node: dict[str, Any] | None, kind: str = "Ready") -> dict[str, Any]:
    for cond in (node or {}).get("status", {}).get("conditions", []):
        if cond["type"] == kind:
            return cond
    return {}


def _heartbeat(cond: dict[str, Any]) -> float:
    return datetime.fromisoformat(cond.get("lastHeartbeatTime") or "1970-01-01T00:00:00Z").timestamp()


async def wait_ready(agent: AgentProcess, timeout: float = 60, what: str = "node Ready") -> dict[str, Any]:
    """The Ready=True this run of the agent posted. Until it posts, the Node still shows what the
    previous agent (or run) last wrote, Ready and pressure conditions included. Heartbeats have
    whole seconds, and an agent starts in a later second than the last one stopped
    (AgentProcess.start), so a heartbeat in the start's second or later is this run's."""
    return await wait_for(lambda: (c := node_condition(node_object())).get("status") == "True"
                          and _heartbeat(c) >= int(agent.started_at) and c, timeout, what, describe=agent.describe)


@pytest.fixture
async def namespace(cluster):
    """A fresh namespace for the test's API objects, deleted afterwards."""
    name = f"t-{secrets.token_hex(3)}"
    kubectl("create", "namespace", name)
    # Pods need the namespace's default service account before the API admits them.
    await wait_for(lambda: kubectl("get", "serviceaccount", "default", "-n", name, check=False).returncode == 0,
                   60, f"the default service account in {name}")
    yield name
    kubectl("delete", "namespace", name, "--wait=false", check=False)


# The machine's disk is shared with every tier and other work: its free space says nothing about
# a test, yet the default disk thresholds (nodefs.available<10%, imagefs.available<15%) would
# then evict the test's apiserver pods, refuse new ones and remove the machine's images, which
# cannot be pulled again here. So a cluster-tier agent watches memory only (the default
# threshold); a test about disk pressure passes its own thresholds (a later flag wins).
TEST_EVICTION_HARD = "--eviction-hard=memory.available<100Mi"


def start_joined_agent(tmp_path: pathlib.Path, *flags: str, endpoint: str = ENDPOINT) -> AgentProcess:
    """pykubelet started as node `pkltest` with a node identity (tmp_path/manifests its static pods),
    on the containerd at `endpoint` (the machine's by default)."""
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    kubeconfig = tmp_path / "node.kubeconfig"
    cluster_sh("node-kubeconfig", NODE, str(kubeconfig), timeout=60)
    # The client CA lets the apiserver in with its kubelet client certificate (logs, exec, stats).
    return AgentProcess(tmp_path, manifests, "--kubeconfig", str(kubeconfig), "--client-ca-file",
                        str(STATE / "pki" / "ca.crt"), TEST_EVICTION_HARD, *flags, endpoint=endpoint).start()


@contextlib.asynccontextmanager
async def ready_node_agent(tmp_path: pathlib.Path, endpoint: str = ENDPOINT) -> AsyncIterator[AgentProcess]:
    """pykubelet joined to the cluster as node `pkltest`, with a node identity, once it is Ready."""
    agent = start_joined_agent(tmp_path, "--node-labels", "pykubelet.test/role=worker", endpoint=endpoint)
    try:
        await wait_ready(agent)
        yield agent
    finally:  # also when it never got Ready: an agent left running would serve the next tests' pods
        agent.shutdown()
        unmount_under(str(tmp_path))  # pods left running keep their token tmpfs mounted


@pytest.fixture
async def node_agent(cluster, cri, tmp_path: pathlib.Path):  # noqa: F811
    """pykubelet joined to the cluster on the machine's containerd, until the test ends."""
    async with ready_node_agent(tmp_path) as agent:
        yield agent


def sleeper_deployment(namespace: str, replicas: int, name: str = "sleeper") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                # Other nodes may share the test control plane (multi-node tests, a second run).
                "spec": {"terminationGracePeriodSeconds": 2, "nodeSelector": {"kubernetes.io/hostname": NODE},
                         "containers": [
                    {"name": "main", "image": BUSYBOX, "command": ["sleep", "3600"]}]},
            },
        },
    }


def pods_in(namespace: str) -> list[dict[str, Any]]:
    return kubectl_json("get", "pods", "-n", namespace)["items"]


def running_pods(namespace: str, count: int) -> list[dict[str, Any]] | None:
    pods = [p for p in pods_in(namespace) if p["status"].get("phase") == "Running"
            and all(c.get("ready") for c in p["status"].get("containerStatuses", []))]
    return pods if len(pods) == count else None
