"""The labels and annotations the kubelet puts on CRI sandboxes and containers.

They are how a restarted agent knows which pod and container each runtime object belongs to,
so they must match the kubelet's keys (crictl and other tools read them too).
"""

from __future__ import annotations

import json

from pykubelet.api.pod import DEFAULT_TERMINATION_MESSAGE_PATH, Container, Pod

POD_NAME = "io.kubernetes.pod.name"
POD_NAMESPACE = "io.kubernetes.pod.namespace"
POD_UID = "io.kubernetes.pod.uid"
CONTAINER_NAME = "io.kubernetes.container.name"

CONTAINER_HASH = "io.kubernetes.container.hash"
# The spec's hash without its resources (the key the kubelet used for it from v1.27 to v1.31):
# what says a running container must be replaced, so that a resize does not replace it.
CONTAINER_HASH_WITHOUT_RESOURCES = "io.kubernetes.container.hashWithoutResources"
CONTAINER_RESTART_COUNT = "io.kubernetes.container.restartCount"
CONTAINER_PORTS = "io.kubernetes.container.ports"
TERMINATION_MESSAGE_PATH = "io.kubernetes.container.terminationMessagePath"
TERMINATION_MESSAGE_POLICY = "io.kubernetes.container.terminationMessagePolicy"
POD_TERMINATION_GRACE = "io.kubernetes.pod.terminationGracePeriod"
PRE_STOP_HANDLER = "io.kubernetes.container.preStopHandler"


def pod_labels(pod: Pod) -> dict[str, str]:
    """The pod's own labels plus the three identity labels (which win on conflict)."""
    labels = dict(pod.labels)
    labels.update({POD_NAME: pod.name, POD_NAMESPACE: pod.namespace, POD_UID: pod.uid})
    return labels


def container_labels(pod: Pod, container: Container) -> dict[str, str]:
    return {POD_NAME: pod.name, POD_NAMESPACE: pod.namespace, POD_UID: pod.uid, CONTAINER_NAME: container.name}


def container_annotations(pod: Pod, container: Container, container_hash: str, hash_without_resources: str,
                          restart_count: int) -> dict[str, str]:
    annotations = {
        CONTAINER_HASH: container_hash,
        CONTAINER_HASH_WITHOUT_RESOURCES: hash_without_resources,
        CONTAINER_RESTART_COUNT: str(restart_count),
        TERMINATION_MESSAGE_PATH: container.raw.get("terminationMessagePath") or DEFAULT_TERMINATION_MESSAGE_PATH,
        TERMINATION_MESSAGE_POLICY: container.raw.get("terminationMessagePolicy") or "File",
        POD_TERMINATION_GRACE: str(pod.termination_grace_period_seconds),
    }
    if container.pre_stop:  # so the hook still runs for a container whose pod spec is gone
        annotations[PRE_STOP_HANDLER] = json.dumps(container.pre_stop.to_dict(), sort_keys=True)
    if container.ports:
        annotations[CONTAINER_PORTS] = json.dumps([
            {k: v for k, v in (("name", p.name), ("hostPort", p.host_port), ("containerPort", p.container_port),
                               ("protocol", p.protocol)) if v}
            for p in container.ports])
    return annotations
