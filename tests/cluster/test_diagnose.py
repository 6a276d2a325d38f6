"""explain and doctor on a node joined to a real control plane: a pod waiting for a ConfigMap that
does not exist, and an apiserver that stops (a cluster of the test's own, on ports of its own, so
stopping its apiserver disturbs nobody)."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
from typing import Any

import pytest

from tests.cluster.conftest import CLUSTER_SH, apply, cluster, kubectl, namespace, node_agent  # noqa: F401
from tests.helpers import wait_for
from tests.runtime.conftest import BUSYBOX, NODE, AgentProcess, cri, free_port  # noqa: F401


def pykubelet(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pykubelet.cli", *args], capture_output=True, text=True,
                          timeout=60)


async def test_a_pod_waiting_for_a_missing_configmap_is_explained_until_the_configmap_exists(node_agent,
                                                                                             namespace):
    apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "needs-config", "namespace": namespace},
           "spec": {"nodeSelector": {"kubernetes.io/hostname": NODE}, "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "main", "image": BUSYBOX, "command": ["sleep", "3600"],
                                    "volumeMounts": [{"name": "settings", "mountPath": "/etc/app"}]}],
                    "volumes": [{"name": "settings", "configMap": {"name": "app-config"}}]}})

    def last_line() -> str:
        result = pykubelet("explain", "pod", "-n", namespace, "needs-config", "--root-dir",
                           str(node_agent.workdir / "root"))
        return result.stdout.rstrip("\n").splitlines()[-1] if result.returncode == 0 else result.stderr

    line = await wait_for(lambda: (lambda line: line if "cannot be set up" in line else None)(last_line()), 60,
                          "the explanation to name the volume", describe=node_agent.describe)
    assert line.startswith('→ Not running: volume "settings" (configMap) cannot be set up: configmap "app-config" '
                           'not found; the containers start once every volume is set up'), line
    kubectl("create", "configmap", "app-config", "-n", namespace, "--from-literal=mode=fast")
    line = await wait_for(lambda: (lambda line: line if "Running and Ready" in line else None)(last_line()), 60,
                          "the pod to run once its ConfigMap exists", describe=node_agent.describe)
    assert line == "→ Running and Ready: 1 of 1 container ready"
    kubectl("delete", "pod", "needs-config", "-n", namespace, "--wait=false")
    await wait_for(lambda: kubectl("get", "pod", "needs-config", "-n", namespace, check=False).returncode != 0, 60,
                   "the pod to go")


def free_port_pair() -> int:
    """A port whose next one is free too (etcd's client and peer ports)."""
    while True:
        port = free_port()
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 1))
                return port
            except OSError:
                continue


@pytest.fixture
def own_cluster(tmp_path: pathlib.Path):
    """A control plane of this test's own: (environment for cluster.sh, its state dir)."""
    state = tmp_path / "cluster"
    env = {**os.environ, "PYKUBELET_CLUSTER_DIR": str(state), "PYKUBELET_API_PORT": str(free_port()),
           "PYKUBELET_ETCD_PORT": str(free_port_pair()), "PYKUBELET_CM_PORT": str(free_port()),
           "PYKUBELET_SCHED_PORT": str(free_port())}

    def cluster_sh(*args: str) -> None:
        result = subprocess.run(["bash", str(CLUSTER_SH), *args], env=env, capture_output=True, text=True,
                                timeout=900)
        assert result.returncode == 0, f"cluster.sh {args} failed:\n{result.stderr[-3000:]}"
    cluster_sh("up")
    try:
        yield cluster_sh, state
    finally:
        cluster_sh("down", "--purge")


def doctor(agent: AgentProcess) -> tuple[int, dict[str, Any]]:
    result = pykubelet("doctor", "-o", "json", "--root-dir", str(agent.workdir / "root"))
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)


def api_checks(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["title"]: c for c in report["checks"] if c["area"] == "API server"}


async def test_a_stopped_apiserver_is_unreachable_and_the_rest_is_still_checked(own_cluster, cri, tmp_path):  # noqa: F811
    cluster_sh, state = own_cluster
    kubeconfig = tmp_path / "node.kubeconfig"
    cluster_sh("node-kubeconfig", NODE, str(kubeconfig))
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    agent = AgentProcess(tmp_path, manifests, "--kubeconfig", str(kubeconfig)).start()
    try:
        async def api_ok() -> dict[str, Any] | None:
            code, report = doctor(agent)
            checks = api_checks(report)
            ready = any(t.startswith(f"Node {NODE}: Ready=True") for t in checks)
            return report if ready and all(c["status"] == "OK" for c in checks.values()) else None
        report = await wait_for(api_ok, 90, "doctor to find the node Ready with a fresh Lease", interval=2,
                                describe=agent.describe)
        titles = list(api_checks(report))
        assert any(t.startswith("client certificate 'system:node:pkltest' (groups system:nodes) from ") for t in titles)
        assert any(t.startswith("the apiserver at https://127.0.0.1:") and "accepts the node's credentials" in t
                   for t in titles), titles
        assert any(t.startswith("Lease renewed ") for t in titles)
        assert [c["status"] for c in report["checks"] if c["area"] == "Clock"] == ["OK"]

        pid = int((state / "run" / "kube-apiserver.pid").read_text())
        os.kill(pid, signal.SIGKILL)  # the apiserver of this test's own cluster
        await wait_for(lambda: not pathlib.Path(f"/proc/{pid}").exists(), 30, "the apiserver to be gone")
        code, report = doctor(agent)
        assert code == 1
        (unreachable,) = [c for c in api_checks(report).values() if c["status"] == "FAIL"]
        assert unreachable["title"].startswith("cannot reach the apiserver at https://127.0.0.1:")
        assert "the agent cannot renew its Lease or report status: the node turns NotReady (Unknown)" \
            in unreachable["evidence"]
        assert unreachable["more"] == f"kubectl --kubeconfig {kubeconfig} get --raw /readyz"
        # The rest is still checked, and the agent still runs.
        assert report["checks"][0]["status"] == "OK" and report["checks"][0]["area"] == "Agent"
        assert any(c["area"] == "Container runtime" and c["status"] == "OK" for c in report["checks"])
    finally:
        agent.shutdown()
