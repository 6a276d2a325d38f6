"""A pod cannot reach the host through a subPath: the attack of CVE-2017-1002101 (a symlink the
pod itself puts in its volume) as a user allowed to create pods would run it, on the real
containerd; and subPaths that stay in their volume keep working and leave no mount behind."""

from __future__ import annotations

import os
import uuid

from tests.helpers import wait_for
from tests.runtime.conftest import NODE, containers_of, phase, pod_manifest, write_manifest
from tests.runtime.test_podspec import log_lines

BUSYBOX = "docker.io/library/busybox:1.36"


def status_of(pod, container: str):
    return next((s for s in pod["status"].get("containerStatuses") or [] if s["name"] == container), None)


def waiting_reason(pod, container: str) -> str:
    status = status_of(pod, container)
    return ((status or {}).get("state", {}).get("waiting") or {}).get("reason", "")


def mounts_under(directory) -> list[str]:
    prefix = os.path.realpath(directory) + "/"
    with open("/proc/self/mountinfo") as f:
        return [p for p in (line.split(" ")[4] for line in f) if p.startswith(prefix)]


async def test_a_symlink_to_the_host_in_a_volume_cannot_be_mounted_through_a_sub_path(agent, manifests, cri):
    marker = f"pykubelet-subpath-escape-{uuid.uuid4().hex[:8]}"
    manifest = pod_manifest("subpath-attack", "cat /host/etc/hostname; sleep 3600", grace=1)
    spec = manifest["spec"]
    spec["volumes"] = [{"name": "v", "emptyDir": {}}]
    spec["initContainers"] = [{"name": "plant", "image": BUSYBOX, "command": ["sh", "-c", "ln -s / /v/x"],
                               "volumeMounts": [{"name": "v", "mountPath": "/v"}]}]
    spec["containers"][0]["volumeMounts"] = [{"name": "v", "mountPath": "/host", "subPath": "x"}]
    # A missing subPath under the link would be created on the host if the link were followed.
    spec["containers"].append({"name": "maker", "image": BUSYBOX, "command": ["sleep", "3600"],
                               "volumeMounts": [{"name": "v", "mountPath": "/made",
                                                 "subPath": f"x/tmp/{marker}"}]})
    path = write_manifest(manifests, "subpath-attack", manifest)
    name = f"subpath-attack-{NODE}"
    pod = await agent.wait_pod(name, lambda p: waiting_reason(p, "main") == "CreateContainerConfigError"
                               and waiting_reason(p, "maker") == "CreateContainerConfigError",
                               60, "both app containers waiting with CreateContainerConfigError")
    assert status_of(pod, "main")["state"]["waiting"]["message"] == \
        'failed to prepare subPath for volumeMount "v" of container "main"'
    assert status_of(pod, "maker")["state"]["waiting"]["message"] == \
        'failed to create subPath directory for volumeMount "v" of container "maker"'
    assert {c.metadata.name for c in await containers_of(cri, name)} == {"plant"}, "an app container was created"
    assert not os.path.lexists(f"/tmp/{marker}"), "the pod made a directory on the host"
    assert mounts_under(agent.workdir / "root") == []

    path.unlink()
    pod_dir = agent.workdir / "root" / "pods" / pod["metadata"]["uid"]
    await wait_for(lambda: not pod_dir.exists(), 30, "the pod's directory removed", describe=agent.describe)
    assert os.path.isdir("/tmp") and os.path.isdir("/etc"), "removing the pod followed its link to the host"


async def test_sub_paths_inside_the_volume_work_and_their_binds_go_with_the_pod(agent, manifests):
    script = "cat /d/data /f; test -d /n && echo made; echo written > /d/from-app; sleep 3600"
    manifest = pod_manifest("subpath-ok", script, grace=1)
    spec = manifest["spec"]
    spec["volumes"] = [{"name": "v", "emptyDir": {}}]
    spec["initContainers"] = [{"name": "prepare", "image": BUSYBOX,
                               "command": ["sh", "-c", "mkdir /v/dir; echo in-dir > /v/dir/data; echo a-file > /v/file"],
                               "volumeMounts": [{"name": "v", "mountPath": "/v"}]}]
    spec["containers"][0]["volumeMounts"] = [
        {"name": "v", "mountPath": "/d", "subPath": "dir"},
        {"name": "v", "mountPath": "/f", "subPath": "file"},
        {"name": "v", "mountPath": "/n", "subPath": "new/made"}]
    path = write_manifest(manifests, "subpath-ok", manifest)
    name = f"subpath-ok-{NODE}"
    pod = await agent.wait_pod(name, lambda p: phase(p) == "Running", 60, "Running")
    lines = await wait_for(lambda: len(log_lines(agent, name, pod)) >= 3 and log_lines(agent, name, pod), 15,
                           "the subPath contents in the log", describe=agent.describe)
    assert lines[:3] == ["in-dir", "a-file", "made"]
    root = agent.workdir / "root"
    pod_dir = root / "pods" / pod["metadata"]["uid"]
    volume = pod_dir / "volumes" / "kubernetes.io~empty-dir" / "v"
    await wait_for(lambda: (volume / "dir" / "from-app").exists(), 15, "the container's write in the volume")
    subpaths = pod_dir / "volume-subpaths" / "v" / "main"
    assert sorted(mounts_under(root)) == [str(os.path.realpath(subpaths / str(i))) for i in range(3)]

    path.unlink()
    await wait_for(lambda: not pod_dir.exists(), 30, "the pod's directory removed", describe=agent.describe)
    assert mounts_under(root) == [], "a subPath bind mount was left behind"
