"""On the real containerd: a static pod whose volume cannot be set up never runs without it. No
sandbox and no container is made, the pod stays Pending with its container ContainerCreating,
the agent says which volume and why, and the pod starts once the volume can be set up."""

from __future__ import annotations

from tests.helpers import wait_for
from tests.runtime.conftest import NODE, containers_of, main_status, phase, pod_manifest, sandboxes_of, write_manifest
from tests.runtime.test_explain import last_line


def creating(pod) -> bool:
    return phase(pod) == "Pending" and main_status(pod)["state"].get("waiting", {}).get("reason") == "ContainerCreating"


async def test_a_volume_type_the_node_cannot_set_up_keeps_the_pod_from_running(agent, cri, manifests):
    manifest = pod_manifest("nfsdata", "echo written > /data/f; sleep 3600",
                            volumeMounts=[{"name": "data", "mountPath": "/data"}])
    manifest["spec"]["volumes"] = [{"name": "data", "nfs": {"server": "127.0.0.1", "path": "/export"}}]
    write_manifest(manifests, "nfsdata", manifest)
    name = f"nfsdata-{NODE}"
    await agent.wait_pod(name, creating, 30, "Pending in ContainerCreating")
    expected = ('volume "data" (nfs) cannot be set up: failed to get Plugin from volumeSpec for volume "data" '
                "err=no volume plugin matched: pykubelet cannot set up nfs volumes")
    await wait_for(lambda: expected in last_line(agent, "nfsdata"), 30, "the volume named by explain",
                   describe=agent.describe)
    assert "Unable to attach or mount volumes: unmounted volumes=[data]" in agent.log()
    assert not await sandboxes_of(cri, name) and not await containers_of(cri, name)


async def test_a_missing_host_path_directory_waits_until_it_is_there(agent, cri, manifests, tmp_path):
    host = tmp_path / "later"
    manifest = pod_manifest("later", "cat /host/motd; sleep 3600",
                            volumeMounts=[{"name": "host", "mountPath": "/host"}])
    manifest["spec"]["volumes"] = [{"name": "host", "hostPath": {"path": str(host), "type": "Directory"}}]
    write_manifest(manifests, "later", manifest)
    name = f"later-{NODE}"
    await agent.wait_pod(name, creating, 30, "Pending in ContainerCreating")
    expected = f'volume "host" (hostPath) cannot be set up: hostPath type check failed: {host} is not a directory'
    await wait_for(lambda: expected in last_line(agent, "later"), 30, "the volume named by explain",
                   describe=agent.describe)
    assert not await sandboxes_of(cri, name) and not await containers_of(cri, name)

    host.mkdir()
    (host / "motd").write_text("from-the-host\n")
    await agent.wait_pod(name, lambda p: phase(p) == "Running", 150, "Running once the directory is there")
