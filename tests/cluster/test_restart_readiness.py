"""An agent restart (every `systemctl restart kubelet`) keeps a Ready pod Ready.

A pod whose readiness probe passes was Ready before the agent stopped; its container kept
running. The restarted agent has no probe result yet, and a slow probe gives it one only seconds
later. The kubelet reports such a container ready meanwhile (it started before the agent did and
the pod was Ready), so no Service loses the endpoint. Checked where a user sees it: the Service's
EndpointSlice, watched for the whole restart, and the Ready condition's lastTransitionTime.
"""

from __future__ import annotations

import json
import subprocess
import time
from datetime import datetime
from typing import Any

from tests.cluster.conftest import ADMIN, KUBECTL, NODE, apply, kubectl, kubectl_json, running_pods
from tests.helpers import wait_for
from tests.runtime.conftest import BUSYBOX

PROBE_SECONDS = 3  # the probe's own run time: after a restart, the first result comes this late
RESTART_GRACE = 10  # seconds a container must have run before the agent started to count as adopted


def web(namespace: str) -> list[dict[str, Any]]:
    probe = {"exec": {"command": ["sh", "-c", f"echo probed >> /tmp/probes; sleep {PROBE_SECONDS}"]},
             "periodSeconds": 5, "timeoutSeconds": 2 * PROBE_SECONDS}
    labels = {"app": "web"}
    return [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": namespace},
         "spec": {"selector": labels, "ports": [{"port": 80, "targetPort": 8080}]}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": namespace},
         "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels},
                               "spec": {"terminationGracePeriodSeconds": 2,
                                        "nodeSelector": {"kubernetes.io/hostname": NODE},
                                        "containers": [{"name": "main", "image": BUSYBOX,
                                                        "command": ["sleep", "3600"],
                                                        "readinessProbe": probe}]}}}},
    ]


def ready_condition(pod: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")


def endpoint_readiness(namespace: str) -> list[bool]:
    slices = kubectl_json("get", "endpointslices", "-n", namespace, "-l", "kubernetes.io/service-name=web")
    return [e.get("conditions", {}).get("ready") is True for s in slices["items"] for e in s.get("endpoints") or []]


def probes_run(namespace: str, pod: str) -> int:
    result = kubectl("exec", "-n", namespace, pod, "--", "cat", "/tmp/probes", check=False)
    return result.stdout.count("probed") if result.returncode == 0 else 0


def watched_slices(output: str) -> list[dict[str, Any]]:
    """The objects of `kubectl get -w -o json` (one JSON document after another)."""
    decoder, objects, at = json.JSONDecoder(), [], 0
    while (at := output.find("{", at)) != -1:
        obj, at = decoder.raw_decode(output, at)
        objects.append(obj)
    return objects


async def test_agent_restart_keeps_a_ready_pod_and_its_endpoint_ready(node_agent, namespace):
    apply(web(namespace))
    (pod,) = await wait_for(lambda: (pods := running_pods(namespace, 1)) and
                            ready_condition(pods[0])["status"] == "True" and pods, 90, "a Ready web pod",
                            describe=node_agent.describe)
    name = pod["metadata"]["name"]
    await wait_for(lambda: endpoint_readiness(namespace) == [True], 60, "the Service's endpoint ready")
    before = ready_condition(pod)["lastTransitionTime"]
    started = datetime.fromisoformat(
        pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"].replace("Z", "+00:00")).timestamp()
    # The agent's restart rule covers containers that ran a while before it started.
    await wait_for(lambda: time.time() > started + RESTART_GRACE + 1, RESTART_GRACE + 30,
                   "the container older than the restart grace period")

    watch = subprocess.Popen([str(KUBECTL), "--kubeconfig", str(ADMIN), "get", "endpointslices", "-n", namespace,
                              "-l", "kubernetes.io/service-name=web", "--watch", "-o", "json"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        probed_at_restart = probes_run(namespace, name)  # through the kubelet API: before it stops
        node_agent.stop()
        node_agent.start()
        # The restarted agent has probed the container again, and reported the pod since.
        await wait_for(lambda: probes_run(namespace, name) > probed_at_restart + 1, 60,
                       "the readiness probe run twice by the restarted agent", describe=node_agent.describe)
        await wait_for(lambda: node_agent.pods() is not None, 30, "the agent serving its pods")
    finally:
        watch.terminate()
        output, _ = watch.communicate(timeout=10)

    after = kubectl_json("get", "pod", "-n", namespace, name)
    assert ready_condition(after)["status"] == "True"
    assert ready_condition(after)["lastTransitionTime"] == before, "the Ready condition flipped during the restart"
    seen = [[e.get("conditions", {}).get("ready") for e in s.get("endpoints") or []] for s in watched_slices(output)]
    assert seen, "the watch saw no EndpointSlice"
    assert all(states == [True] for states in seen), f"the endpoint was not ready at some point: {seen}"
