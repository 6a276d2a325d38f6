"""Standalone (no apiserver): downwardAPI volumes work for static pods; a static pod that
refers to API objects is refused as the kubelet refuses it, naming the file and the field."""

from __future__ import annotations

import os

from tests.helpers import wait_for
from tests.runtime.conftest import NODE, phase, pod_manifest, remove_test_pods, write_manifest


async def test_static_pod_gets_a_downward_api_volume_and_api_references_are_refused(agent, manifests, tmp_path):
    info = pod_manifest("info", "cat /etc/info/labels; echo; sleep 3600",
                        volumeMounts=[{"name": "info", "mountPath": "/etc/info"}])
    info["metadata"]["labels"] = {"app": "info", "tier": "gold"}
    info["spec"]["volumes"] = [{"name": "info", "downwardAPI": {"items": [
        {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}]
    write_manifest(manifests, "info", info)
    needs_api = pod_manifest("needs-api", "sleep 3600", envFrom=[{"configMapRef": {"name": "settings"}}])
    write_manifest(manifests, "needs-api", needs_api)

    pod = await agent.wait_pod(f"info-{NODE}", lambda p: phase(p) == "Running", 30, "the info pod Running")
    volume = tmp_path / "root" / "pods" / pod["metadata"]["uid"] / "volumes" / "kubernetes.io~downward-api" / "info"
    assert (volume / "labels").read_text() == 'app="info"\ntier="gold"'
    assert os.path.ismount(volume)

    await wait_for(lambda: "needs-api.yaml: static pods may not reference configmaps "
                           "(spec.containers[0].envFrom[0].configMapRef)" in agent.log(), 10,
                   "the refusal in the agent log", describe=agent.describe)
    assert f"needs-api-{NODE}" not in (agent.pods() or {})

    (manifests / "info.yaml").unlink()
    await wait_for(lambda: not volume.exists(), 30, "the volume to be removed with the pod", describe=agent.describe)


async def test_a_pod_gone_while_the_agent_was_down_has_its_directory_unmounted_and_removed(agent, cri, manifests,
                                                                                          tmp_path):
    info = pod_manifest("gone", "sleep 3600", volumeMounts=[{"name": "info", "mountPath": "/etc/info"}])
    info["spec"]["volumes"] = [{"name": "info", "downwardAPI": {"items": [
        {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}}]
    write_manifest(manifests, "gone", info)
    pod = await agent.wait_pod(f"gone-{NODE}", lambda p: phase(p) == "Running", 30, "the pod Running")
    pod_dir = tmp_path / "root" / "pods" / pod["metadata"]["uid"]
    assert os.path.ismount(pod_dir / "volumes" / "kubernetes.io~downward-api" / "info")

    agent.stop()
    (manifests / "gone.yaml").unlink()
    await remove_test_pods(cri)  # the runtime lost it too (say, containerd's state was wiped)
    agent.start()
    await wait_for(lambda: not pod_dir.exists(), 30, "the orphaned pod directory to be removed",
                   describe=agent.describe)
    assert str(pod_dir) not in open("/proc/mounts").read()
