"""mountPropagation on the real containerd: a HostToContainer mount sees what the host mounts
later, a private one does not."""

from __future__ import annotations

import subprocess

from tests.helpers import wait_for
from tests.runtime.conftest import BUSYBOX, NODE, phase, pod_manifest, write_manifest
from tests.runtime.test_podspec_local import log_lines


def mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True)


def umount(path) -> None:
    subprocess.run(["umount", str(path)], check=False, capture_output=True)


async def test_a_host_to_container_mount_sees_a_mount_made_on_the_host_after_the_start(agent, manifests, tmp_path):
    shared = tmp_path / "shared"
    (shared / "sub").mkdir(parents=True)
    # The machine's / is a private mount: nothing would propagate from it. The runtime wants the
    # source of a HostToContainer mount on a shared (or slave) mount, so the test makes its own.
    mount("--bind", str(shared), str(shared))
    try:
        mount("--make-rshared", str(shared))
        manifest = pod_manifest("propagation", "until [ -f /data/sub/marker ]; do sleep 0.2; done; "
                                               "cat /data/sub/marker; sleep 3600")
        manifest["spec"]["volumes"] = [{"name": "data", "hostPath": {"path": str(shared)}}]
        manifest["spec"]["containers"][0]["volumeMounts"] = [
            {"name": "data", "mountPath": "/data", "mountPropagation": "HostToContainer"}]
        manifest["spec"]["containers"].append(
            {"name": "private", "image": BUSYBOX, "volumeMounts": [{"name": "data", "mountPath": "/data"}],
             "command": ["sh", "-c", "until [ -f /data/flag ]; do sleep 0.2; done; ls /data/sub; "
                                     "echo private-done; sleep 3600"]})
        path = write_manifest(manifests, "propagation", manifest)
        name = f"propagation-{NODE}"
        pod = await agent.wait_pod(name, lambda p: phase(p) == "Running", 60, "Running")

        mount("-t", "tmpfs", "tmpfs", str(shared / "sub"))  # after both containers started
        (shared / "sub" / "marker").write_text("mounted-on-the-host\n")
        assert await wait_for(lambda: log_lines(agent, name, pod) == ["mounted-on-the-host"], 15,
                              "the HostToContainer mount to show the host's new mount", describe=agent.describe)
        (shared / "flag").write_text("")  # on the volume's own filesystem: both containers see it
        seen_privately = await wait_for(lambda: (lines := log_lines(agent, name, pod, "private"))
                                        and lines[-1] == "private-done" and lines, 15, "the private container's ls",
                                        describe=agent.describe)
        assert seen_privately == ["private-done"], "a private mount must not see the host's later mount"

        path.unlink()
        await wait_for(lambda: name not in (agent.pods() or {}), 30, "the pod gone", describe=agent.describe)
    finally:
        umount(shared / "sub")
        umount(shared)
    mounts = subprocess.run(["findmnt", "-rn", "-o", "TARGET"], capture_output=True, text=True).stdout
    assert str(shared) not in mounts, "the test leaves no mount behind"
