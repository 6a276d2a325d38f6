"""`pykubelet pods` and `pykubelet cri ...` as a user types them."""

from __future__ import annotations

import subprocess
import sys

from tests.runtime.conftest import ENDPOINT, NODE, containers_of, phase, pod_manifest, write_manifest


def pykubelet(*args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "pykubelet.cli", *args], capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 0, f"pykubelet {' '.join(args)} failed: {result.stderr}"
    return result.stdout


async def test_pods_and_cri_commands_show_the_running_pod(agent, cri, manifests):
    write_manifest(manifests, "shown", pod_manifest("shown", "echo visible-line; sleep 3600"))
    name = f"shown-{NODE}"
    pod = await agent.wait_pod(name, lambda p: phase(p) == "Running", 30, "Running")

    table = pykubelet("pods", "--root-dir", str(agent.workdir / "root"))
    (row,) = [line for line in table.splitlines() if name in line]
    assert "Running" in row and "1/1" in row and pod["status"]["podIP"] in row and "main=running" in row

    (container,) = await containers_of(cri, name)
    assert container.id[:13] in pykubelet("cri", "-r", ENDPOINT, "ps")
    assert name in pykubelet("cri", "-r", ENDPOINT, "pods")
    assert "docker.io/library/busybox" in pykubelet("cri", "-r", ENDPOINT, "images")
    assert pykubelet("cri", "-r", ENDPOINT, "logs", container.id[:13]).splitlines()[0] == "visible-line"
    assert f'"id": "{container.id}"' in pykubelet("cri", "-r", ENDPOINT, "inspect", container.id[:13])


def test_pods_command_says_when_no_agent_answers():
    result = subprocess.run([sys.executable, "-m", "pykubelet.cli", "pods", "--root-dir", "/nonexistent"],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 1 and "Is pykubelet running?" in result.stderr
