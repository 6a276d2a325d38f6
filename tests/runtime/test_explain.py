"""`pykubelet explain pod` on a standalone node, as a user types it: each way a static pod fails
to come up is named in the last line of the explanation, from what the agent recorded."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers import wait_for
from tests.runtime.conftest import NODE, main_status, pod_manifest, write_manifest


def explain(agent, name: str, *extra: str) -> str:
    result = subprocess.run([sys.executable, "-m", "pykubelet.cli", "explain", "pod", name, "--root-dir",
                             str(agent.workdir / "root"),
                             *extra], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, f"explain failed: {result.stderr}"
    return result.stdout


def last_line(agent, name: str) -> str:
    return explain(agent, name).rstrip("\n").splitlines()[-1]


def waiting_reason(pod) -> str:
    return main_status(pod)["state"].get("waiting", {}).get("reason", "")


async def test_a_healthy_pod_is_running_and_ready_and_its_story_has_every_step(agent, manifests):
    probe = {"exec": {"command": ["true"]}, "periodSeconds": 1}
    write_manifest(manifests, "fine", pod_manifest("fine", "sleep 3600", readinessProbe=probe))
    await agent.wait_pod(f"fine-{NODE}", lambda p: main_status(p).get("ready"), 60, "ready")
    # Named without its -<node> suffix, as the manifest names it.
    text = explain(agent, "fine")
    assert text.splitlines()[-1] == "→ Running and Ready: 1 of 1 container ready"
    for step in ("admitted (a static pod", "sandbox ", "created (attempt 0): IP 10.", "netns /var/run/netns/",
                 'image "docker.io/library/busybox:1.36" already present', "container created and started",
                 "readiness probe succeeded"):
        assert step in text, f"{step!r} missing from:\n{text}"
    doc = json.loads(explain(agent, "fine", "-o", "json"))
    assert doc["verdict"] == {"ok": True, "text": "Running and Ready: 1 of 1 container ready"}
    sandbox = next(s for s in doc["history"]["steps"] if s["kind"] == "sandbox")
    assert sandbox["details"]["ip"] == doc["pod"]["status"]["podIP"] and sandbox["seconds"] > 0


async def test_a_missing_image_is_named_with_the_pull_error(agent, manifests):
    image = "localhost:5/pykubelet-test/missing:1"  # nothing listens there: the pull fails at once
    write_manifest(manifests, "noimage", pod_manifest("noimage", "sleep 3600", image=image))
    await agent.wait_pod(f"noimage-{NODE}", lambda p: waiting_reason(p) in ("ErrImagePull", "ImagePullBackOff"),
                         60, "a pull error")
    line = last_line(agent, "noimage")
    assert line.startswith(f'→ Not running: container "main" has no image: Failed to pull image "{image}": '), line
    assert "next pull in" in line or "next pull now" in line


async def test_a_crash_loop_is_named_with_its_exit_code_and_back_off(agent, manifests):
    write_manifest(manifests, "crashy", pod_manifest("crashy", "echo starting; exit 3", grace=1))
    await agent.wait_pod(f"crashy-{NODE}", lambda p: waiting_reason(p) == "CrashLoopBackOff"
                         and main_status(p)["restartCount"] >= 2, 90, "CrashLoopBackOff after two restarts")
    line = last_line(agent, "crashy")
    assert line.startswith('→ Not running: container "main" keeps crashing: it exited with code 3 (Error), '), line
    assert "restarts so far; back-off " in line
    text = explain(agent, "crashy")
    assert text.count("exited with code 3 (Error)") >= 2


async def test_a_failing_readiness_probe_is_named_with_its_output(agent, manifests):
    probe = {"exec": {"command": ["cat", "/tmp/ready"]}, "periodSeconds": 1, "failureThreshold": 1}
    write_manifest(manifests, "unready", pod_manifest("unready", "sleep 3600", readinessProbe=probe))
    name = f"unready-{NODE}"
    await agent.wait_pod(name, lambda p: "running" in main_status(p)["state"], 60, "running")

    async def says_why() -> str | None:
        line = last_line(agent, "unready")
        return line if "fails its readiness probe" in line else None
    line = await wait_for(says_why, 30, "the readiness failure in the explanation", describe=agent.describe)
    assert line.startswith('→ Running but not Ready: container "main" fails its readiness probe: cat: can\'t open '
                           "'/tmp/ready': No such file or directory ("), line


async def test_explain_says_when_no_agent_answers_and_when_the_pod_is_unknown(agent):
    result = subprocess.run([sys.executable, "-m", "pykubelet.cli", "explain", "pod", "x", "--root-dir",
                             "/nonexistent"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 1 and "Is pykubelet running?" in result.stderr
    result = subprocess.run([sys.executable, "-m", "pykubelet.cli", "explain", "pod", "nosuch", "--root-dir",
                             str(agent.workdir / "root")], capture_output=True, text=True, timeout=30)
    assert result.returncode == 1 and "this node has no pod default/nosuch" in result.stderr
