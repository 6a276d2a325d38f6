"""Pods from the apiserver on a real control plane: scheduled here, run, reported, deleted."""

from __future__ import annotations

import json
import os
import signal

from pykubelet.runtime import labels
from tests.cluster.conftest import (STATE, apply, cluster_sh, kubectl, kubectl_json, pods_in, running_pods,
                                    sleeper_deployment)
from tests.helpers import wait_for
from tests.runtime.conftest import NODE, pod_manifest, write_manifest


async def test_deployment_runs_on_the_node_and_scales_to_zero(node_agent, namespace, cri):
    apply(sleeper_deployment(namespace, replicas=3))
    pods = await wait_for(lambda: running_pods(namespace, 3), 90, "3 Running pods", describe=node_agent.describe)
    ips = {p["status"]["podIP"] for p in pods}
    assert len(ips) == 3 and all(ips)
    for pod in pods:
        assert pod["spec"]["nodeName"] == NODE
        status = pod["status"]
        assert status["hostIP"] and status["startTime"]
        assert {c["type"]: c["status"] for c in status["conditions"]}["Ready"] == "True"
        (cs,) = status["containerStatuses"]
        assert cs["containerID"].startswith("containerd://") and cs["imageID"] and cs["started"]

    events = kubectl_json("get", "events", "-n", namespace)["items"]
    reasons = {e["reason"] for e in events if e["source"].get("component") == "kubelet"}
    assert {"Pulled", "Created", "Started"} <= reasons

    kubectl("scale", "deployment/sleeper", "-n", namespace, "--replicas=0")
    await wait_for(lambda: not pods_in(namespace), 60, "every pod gone from the API", describe=node_agent.describe)

    async def no_containers():
        return not await cri.list_containers({labels.POD_NAMESPACE: namespace})
    await wait_for(no_containers, 30, "every container gone from the node")


async def test_kubectl_delete_stops_the_containers_then_removes_the_pod(node_agent, namespace, cri):
    manifest = pod_manifest("lonely", "sleep 3600", grace=2)
    manifest["metadata"]["namespace"] = namespace
    manifest["spec"]["nodeSelector"] = {"kubernetes.io/hostname": NODE}
    apply(manifest)
    await wait_for(lambda: running_pods(namespace, 1), 60, "the pod Running", describe=node_agent.describe)
    kubectl("delete", "pod", "lonely", "-n", namespace, "--wait=true", "--timeout=60s")
    assert not await cri.list_containers({labels.POD_NAMESPACE: namespace})


async def test_static_pod_gets_a_mirror_pod_that_comes_back_after_delete(node_agent, cri):
    write_manifest(node_agent.manifests, "mirrored", pod_manifest("mirrored", "sleep 3600"))
    name = f"mirrored-{NODE}"

    def mirror():
        result = kubectl("get", "pod", name, "-n", "default", "-o", "json", check=False)
        if result.returncode != 0:
            return None
        pod = json.loads(result.stdout)
        return pod if pod["status"].get("phase") == "Running" else None

    first = await wait_for(mirror, 60, "the mirror pod Running in the API", describe=node_agent.describe)
    annotations = first["metadata"]["annotations"]
    assert annotations["kubernetes.io/config.source"] == "file"
    assert annotations["kubernetes.io/config.mirror"] == annotations["kubernetes.io/config.hash"]
    assert first["metadata"]["ownerReferences"][0]["kind"] == "Node"
    (container,) = await cri.list_containers({labels.POD_NAME: name})

    kubectl("delete", "pod", name, "-n", "default", "--wait=false")
    second = await wait_for(lambda: (m := mirror()) and m["metadata"]["uid"] != first["metadata"]["uid"] and m,
                            60, "the mirror pod recreated", describe=node_agent.describe)
    assert second["status"]["containerStatuses"][0]["containerID"] == f"containerd://{container.id}"

    (node_agent.manifests / "mirrored.yaml").unlink()
    await wait_for(lambda: kubectl("get", "pod", name, "-n", "default", check=False).returncode != 0, 60,
                   "the mirror pod deleted with its static pod", describe=node_agent.describe)


async def test_admission_rejections_are_visible_as_pod_status(node_agent, namespace):
    greedy = pod_manifest("greedy", "sleep 3600", resources={"requests": {"cpu": "500"}})
    greedy["metadata"]["namespace"] = namespace
    greedy["spec"]["nodeName"] = NODE  # bypasses the scheduler, as a user binding by hand does
    apply(greedy)

    def failed():
        pod = kubectl_json("get", "pod", "greedy", "-n", namespace)
        return pod if pod["status"].get("phase") == "Failed" else None
    pod = await wait_for(failed, 60, "the greedy pod Failed", describe=node_agent.describe)
    assert pod["status"]["reason"] == "OutOfcpu"
    assert pod["status"]["message"].startswith("Pod was rejected: Node didn't have enough resource: cpu")


async def test_apiserver_restart_mid_run_restarts_no_container(node_agent, namespace):
    apply(sleeper_deployment(namespace, replicas=2))
    before = await wait_for(lambda: running_pods(namespace, 2), 90, "2 Running pods", describe=node_agent.describe)
    ids = {p["status"]["containerStatuses"][0]["containerID"] for p in before}

    pid = int((STATE / "run" / "kube-apiserver.pid").read_text())
    # SIGKILL: a graceful stop would wait up to a minute for open watches to drain.
    os.kill(pid, signal.SIGKILL)
    await wait_for(lambda: not os.path.exists(f"/proc/{pid}"), 30, "the old apiserver to exit")
    cluster_sh("up", timeout=300)

    kubectl("scale", "deployment/sleeper", "-n", namespace, "--replicas=3")
    after = await wait_for(lambda: running_pods(namespace, 3), 90, "a third pod Running after the restart",
                           describe=node_agent.describe)
    still = {p["status"]["containerStatuses"][0]["containerID"] for p in after}
    assert ids <= still, "a container was restarted"
    assert all(p["status"]["containerStatuses"][0]["restartCount"] == 0 for p in after)
