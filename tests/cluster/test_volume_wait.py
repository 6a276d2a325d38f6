"""On a real control plane: a pod whose claim does not exist never runs without it. It
stays Pending in ContainerCreating, and `kubectl describe` shows the kubelet's FailedMount event
naming the volume and the reason."""

from __future__ import annotations

import re

from tests.cluster.conftest import apply
from tests.cluster.test_podspec_api import events, get_pod, pod, waiting
from tests.helpers import wait_for
from tests.runtime.conftest import NODE, containers_of, sandboxes_of


async def test_a_claim_keeps_the_pod_pending_with_a_failed_mount_event(node_agent, cri, namespace):
    claimed = pod(namespace, "claimed", "echo written > /data/f; sleep 3600",
                  volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "db-data"}}],
                  mounts=[{"name": "data", "mountPath": "/data"}])
    del claimed["spec"]["nodeSelector"]
    claimed["spec"]["nodeName"] = NODE  # bound by hand: a scheduler waits for the claim to exist
    apply(claimed)
    # Nothing of the pod is set up while one volume cannot be: the token volume the API added
    # (kube-api-access-<random>) is unmounted too.
    expected = re.compile(
        r"Unable to attach or mount volumes: unmounted volumes=\[data kube-api-access-\w+\], unattached volumes=\[\], "
        rf"failed to process volumes=\[data\]: error processing PVC {namespace}/db-data: failed to fetch PVC from "
        r'API server: persistentvolumeclaims "db-data" not found')
    await wait_for(lambda: any(expected.fullmatch(m) for m in events(namespace, "FailedMount")), 60,
                   "the FailedMount event", describe=node_agent.describe)
    assert waiting(namespace, "claimed").get("reason") == "ContainerCreating"
    assert (get_pod(namespace, "claimed") or {})["status"]["phase"] == "Pending"
    assert not await sandboxes_of(cri, "claimed") and not await containers_of(cri, "claimed")
