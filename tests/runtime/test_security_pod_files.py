"""Attacks through a pod's files and manifests, done as a user who may create pods would, on the
real containerd: the agent stays responsive, nothing outside its directories changes, and other
local users cannot read pod data."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request

import pytest

from tests.helpers import unmount_under, wait_for
from tests.runtime.conftest import (BUSYBOX, NODE, AgentProcess, main_status, phase, pod_manifest, remove_test_pods,
                                    write_manifest)
from tests.unit.test_manifest_safety import alias_bomb

NOBODY = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--")


def healthy(agent: AgentProcess) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{agent.port}/healthz", timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def running(pod) -> bool:
    return phase(pod) == "Running" and "running" in main_status(pod)["state"]


def fifo_pod() -> dict:
    """An init container makes a FIFO in an emptyDir; the app mounts it at its termination-message
    path through a subPath and exits. Opening that FIFO for reading would wait forever."""
    manifest = pod_manifest("fifo", "exit 3", restart_policy="Never")
    manifest["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    manifest["spec"]["initContainers"] = [{"name": "mkfifo", "image": BUSYBOX, "command": ["mkfifo", "/v/fifo"],
                                           "volumeMounts": [{"name": "scratch", "mountPath": "/v"}]}]
    manifest["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "scratch", "mountPath": "/dev/termination-log", "subPath": "fifo"}]
    return manifest


def finished(pod) -> bool:
    """The app exited (or the runtime refused the FIFO mount: the agent is not stuck either way)."""
    state = main_status(pod)["state"] if pod["status"].get("containerStatuses") else {}
    return "terminated" in state or state.get("waiting", {}).get("reason") in (
        "CreateContainerConfigError", "CreateContainerError", "RunContainerError")


async def test_a_fifo_at_the_termination_message_path_freezes_nothing(agent, cri, manifests):
    write_manifest(manifests, "witness", pod_manifest("witness", "sleep 3600"))
    await agent.wait_pod(f"witness-{NODE}", running, 30, "the witness pod Running")
    write_manifest(manifests, "fifo", fifo_pod())
    pod = await agent.wait_pod(f"fifo-{NODE}", finished, 60, "the FIFO pod's app container to have exited")
    assert healthy(agent), "the agent stopped answering /healthz after the container exited"
    if "terminated" in main_status(pod)["state"]:
        assert main_status(pod)["state"]["terminated"]["exitCode"] == 3
        assert "message" not in main_status(pod)["state"]["terminated"], "only the agent's own empty file is read"
    write_manifest(manifests, "later", pod_manifest("later", "sleep 3600"))
    await agent.wait_pod(f"later-{NODE}", running, 30, "a pod written afterwards Running (pods keep syncing)")

    agent.stop()
    agent.start()  # adopts the exited container: reads its termination message again
    await wait_for(lambda: healthy(agent), 20, "the restarted agent to answer /healthz", describe=agent.describe)
    await agent.wait_pod(f"fifo-{NODE}", finished, 30, "the adopted FIFO pod's status")
    write_manifest(manifests, "after-restart", pod_manifest("after-restart", "sleep 3600"))
    await agent.wait_pod(f"after-restart-{NODE}", running, 30, "a new pod Running after the restart")
    assert healthy(agent)


@pytest.mark.parametrize("form", ["relative", "absolute"])
async def test_a_static_pod_uid_that_is_a_path_is_refused_and_removing_it_deletes_nothing(agent, manifests,
                                                                                           tmp_path, form):
    marker = tmp_path / "outside-the-root-dir"
    marker.mkdir()
    (marker / "keep").write_text("precious")
    # <root>/pods/<uid> with the root dir at tmp_path/root: ../../ leads to tmp_path.
    uid = f"../../{marker.name}" if form == "relative" else str(marker)
    evil = pod_manifest("evil", "sleep 3600")
    evil["metadata"]["uid"] = uid
    path = write_manifest(manifests, "evil", evil)
    write_manifest(manifests, "good", pod_manifest("good", "sleep 3600"))
    await agent.wait_pod(f"good-{NODE}", running, 30, "the good pod Running")
    await wait_for(lambda: str(path) in agent.log() and "metadata.uid" in agent.log(), 10,
                   "an error naming the file and metadata.uid", describe=agent.describe)
    assert f"evil-{NODE}" not in (agent.pods() or {})

    os.remove(path)
    await wait_for(lambda: "Manifest file is valid again or gone" in agent.log(), 10,
                   "the agent to see the manifest gone", describe=agent.describe)
    write_manifest(manifests, "after", pod_manifest("after", "sleep 3600"))
    await agent.wait_pod(f"after-{NODE}", running, 30, "a pod written afterwards Running")
    assert (marker / "keep").read_text() == "precious"
    assert running(agent.pods()[f"good-{NODE}"])


async def test_an_alias_bomb_is_refused_naming_the_file_and_the_agent_stays_responsive(agent, manifests):
    path = write_manifest(manifests, "bomb", alias_bomb())
    write_manifest(manifests, "good", pod_manifest("good", "sleep 3600"))
    await agent.wait_pod(f"good-{NODE}", running, 30, "the good pod Running beside the bomb")
    await wait_for(lambda: str(path) in agent.log() and "alias" in agent.log(), 10,
                   "an error naming the bomb's file", describe=agent.describe)
    assert healthy(agent)
    assert set(agent.pods() or {}) == {f"good-{NODE}"}


def as_nobody(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run([*NOBODY, *command], capture_output=True, text=True, timeout=10)


@pytest.fixture
def open_workdir():
    """A work directory every local user may enter (pytest's tmp_path is 0700 for root), so that
    only the agent's own modes stand between another user and the pods' files."""
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="pykubelet-modes-"))
    os.chmod(workdir, 0o755)
    (workdir / "manifests").mkdir()
    yield workdir
    unmount_under(str(workdir))
    shutil.rmtree(workdir, ignore_errors=True)


async def test_other_local_users_cannot_read_pod_files_or_logs(cri, open_workdir):
    agent = AgentProcess(open_workdir, open_workdir / "manifests").start()
    try:
        info = pod_manifest("private", "echo private-log-line; sleep 3600")
        info["metadata"]["labels"] = {"secret-ish": "s3cr3t"}
        info["spec"]["volumes"] = [{"name": "info", "downwardAPI": {"items": [
            {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}]
        info["spec"]["containers"][0]["volumeMounts"] = [{"name": "info", "mountPath": "/info"}]
        write_manifest(open_workdir / "manifests", "private", info)
        pod = await agent.wait_pod(f"private-{NODE}", running, 60, "the pod Running")
        uid = pod["metadata"]["uid"]
        root, logs = open_workdir / "root", agent.logs_dir
        volume_file = root / "pods" / uid / "volumes" / "kubernetes.io~downward-api" / "info" / "labels"
        log_file = logs / f"default_private-{NODE}_{uid}" / "main" / "0.log"
        await wait_for(lambda: log_file.exists() and "private-log-line" in log_file.read_text(), 10,
                       "the container's log line")
        assert "s3cr3t" in volume_file.read_text()

        assert as_nobody("ls", str(open_workdir)).returncode == 0, "the way to the files is open to nobody"
        for directory in (root / "pods", root / "pods" / uid, logs):
            listing = as_nobody("ls", str(directory))
            assert listing.returncode != 0 and "Permission denied" in listing.stderr, directory
        for path in (volume_file, log_file):
            read = as_nobody("cat", str(path))
            assert read.returncode != 0 and "s3cr3t" not in read.stdout and "private" not in read.stdout, path
        assert os.stat(root / "pods").st_mode & 0o777 == 0o750
        assert os.stat(logs).st_mode & 0o777 == 0o750
    finally:
        agent.shutdown()
        await remove_test_pods(cri)  # before the work directory goes
