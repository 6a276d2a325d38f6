"""`pykubelet doctor` against a real node: each NotReady cause is broken for real (a containerd
stopped, a CNI config removed, the agent stopped, a disk-pressure threshold above what the disk
has) and doctor's verdict on it checked, with its exit code.

The containerd that is stopped and whose CNI config is removed is the tests' own
(tests/bed/containerd-node.sh), never the machine's.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from typing import Any

import pytest
import yaml

from pykubelet.cri.client import CRIClient
from pykubelet.network import assets
from tests.helpers import wait_for
from tests.runtime.conftest import ENDPOINT, AgentProcess, free_port

REPO = pathlib.Path(__file__).resolve().parents[2]
CONTAINERD_NODE = REPO / "tests" / "bed" / "containerd-node.sh"
OWN_CONTAINERD = "pkl-doctor"


def doctor(*flags: str) -> tuple[int, dict[str, Any]]:
    result = subprocess.run([sys.executable, "-m", "pykubelet.cli", "doctor", "-o", "json", *flags],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode in (0, 1), f"doctor failed to run: {result.stderr}"
    return result.returncode, json.loads(result.stdout)


def checks(report: dict[str, Any], area: str) -> list[dict[str, Any]]:
    return [c for c in report["checks"] if c["area"] == area]


def verdicts(report: dict[str, Any], area: str) -> str:
    return "\n".join(f"{c['status']} {c['title']}" for c in checks(report, area))


@pytest.fixture(scope="module")
def own_containerd():
    """A containerd of the tests' own, with an empty CNI conf dir: (endpoint, conf dir)."""
    up = subprocess.run(["bash", str(CONTAINERD_NODE), "up", OWN_CONTAINERD], capture_output=True, text=True,
                        timeout=300)
    assert up.returncode == 0, up.stderr
    yield up.stdout.strip().splitlines()[-1], pathlib.Path(f"/run/pykubelet-nodes/{OWN_CONTAINERD}/net.d")
    subprocess.run(["bash", str(CONTAINERD_NODE), "down", OWN_CONTAINERD], capture_output=True, timeout=120)


async def network_ready(endpoint: str) -> bool:
    async with CRIClient(endpoint) as cri:
        conditions = (await cri.status()).status.conditions
    return next(c.status for c in conditions if c.type == "NetworkReady")


async def test_a_removed_cni_config_is_network_not_ready_naming_the_conf_dir(own_containerd, tmp_path):
    endpoint, conf_dir = own_containerd
    conflist = assets.render("pod-network.conflist", bridge="pkldoc0", pod_cidr="10.77.0.0/24",
                             ipam_dir=str(tmp_path / "ipam"))
    (conf_dir / "10-test.conflist").write_text(json.dumps(conflist))
    flags = ("--container-runtime-endpoint", endpoint, "--network-mode", "runtime", "--cni-conf-dir", str(conf_dir),
             "--healthz-port", str(free_port()), "--root-dir", str(tmp_path / "root"))
    await wait_for(lambda: network_ready(endpoint), 30, "containerd to load the CNI config")
    _, report = doctor(*flags)
    network = verdicts(report, "Network")
    assert "OK NetworkReady=true" in network
    assert f"OK CNI config {conf_dir}/10-test.conflist: network 'pykubelet', plugins bridge → portmap" in network

    (conf_dir / "10-test.conflist").unlink()

    async def not_ready() -> bool:
        return not await network_ready(endpoint)
    await wait_for(not_ready, 30, "containerd to drop the CNI config")
    code, report = doctor(*flags)
    assert code == 1
    network = verdicts(report, "Network")
    assert "FAIL NetworkReady=false (NetworkPluginNotReady: Network plugin returns error: cni plugin not " \
           "initialized)" in network
    assert f"FAIL no CNI config in {conf_dir} (it is empty)" in network
    (missing,) = [c for c in checks(report, "Network") if c["title"].startswith("no CNI config")]
    assert missing["more"] == f"ls -l {conf_dir}"
    assert any(line.startswith("containerd: cni config load failed") for line in
               next(c for c in checks(report, "Network") if "NetworkReady" in c["title"])["evidence"])


async def test_a_stopped_containerd_is_the_runtime_down(own_containerd, tmp_path):
    endpoint, _ = own_containerd
    flags = ("--container-runtime-endpoint", endpoint, "--healthz-port", str(free_port()),
             "--root-dir", str(tmp_path / "root"))
    _, report = doctor(*flags)
    assert verdicts(report, "Container runtime").startswith("OK containerd ")

    subprocess.run(["bash", str(CONTAINERD_NODE), "down", OWN_CONTAINERD], check=True, capture_output=True,
                   timeout=120)
    code, report = doctor(*flags)
    assert code == 1
    (runtime,) = checks(report, "Container runtime")
    socket = endpoint.removeprefix("unix://")
    assert runtime["status"] == "FAIL"
    assert runtime["title"] == f"the container runtime is down: no socket at {socket}"
    assert runtime["more"] == "pgrep -a containerd"
    assert "- the container runtime is down: no socket at " + socket in "\n".join(report["summary"])


async def test_a_stopped_agent_is_said_first_and_the_rest_is_still_checked(cri, tmp_path, manifests):
    agent = AgentProcess(tmp_path, manifests).start()
    try:
        await wait_for(lambda: agent.pods() is not None, 30, "the agent to answer", describe=agent.describe)
        code, report = doctor("--root-dir", str(tmp_path / "root"))
        assert report["settings_from"] == f"the settings of the running agent (pid {agent.proc.pid})"
        first = report["checks"][0]
        assert (first["area"], first["status"]) == ("Agent", "OK") and f"pid {agent.proc.pid}" in first["title"]
        assert "PLEG relisted" in verdicts(report, "Agent")
    finally:
        agent.shutdown()
    flags = ("--healthz-port", str(agent.port), "--container-runtime-endpoint", ENDPOINT,
             "--root-dir", str(tmp_path / "root"))
    result = subprocess.run([sys.executable, "-m", "pykubelet.cli", "doctor", *flags], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[1] == "Settings: the flags given to doctor"
    assert lines[3:5] == ["Agent", f"  FAIL  the agent is not running: nothing answers on "
                                   f"{tmp_path / 'root' / 'pykubelet.sock'}"]
    assert "Container runtime\n  OK    containerd " in result.stdout  # and the rest is checked


async def test_a_disk_pressure_threshold_above_the_free_space_is_disk_pressure(cri, tmp_path, manifests):
    config = tmp_path / "kubelet.yaml"
    config.write_text(yaml.safe_dump({"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
                                      "evictionHard": {"nodefs.available": "99%", "memory.available": "100Mi"}}))
    agent = AgentProcess(tmp_path, manifests, "--config", str(config)).start()
    try:
        await wait_for(lambda: agent.pods() is not None, 30, "the agent to answer", describe=agent.describe)
        # Only the root dir (where its socket is): the rest (thresholds) doctor takes from the running agent.
        code, report = doctor("--root-dir", str(tmp_path / "root"))
    finally:
        agent.shutdown()
    assert code == 1
    (disk,) = [c for c in checks(report, "Resources") if "DiskPressure" in c["title"]]
    assert disk["status"] == "FAIL"
    assert disk["title"] == "DiskPressure: nodefs.available below its evictionHard threshold"
    root = tmp_path / "root"
    assert any(line.startswith(f"nodefs.available on {root}: ") and "evictionHard 99% = " in line
               for line in disk["evidence"])
    assert disk["more"].startswith(f"df -h {root}")
    (memory,) = [c for c in checks(report, "Resources") if "MemoryPressure" in c["title"]]
    assert memory["status"] == "OK"
