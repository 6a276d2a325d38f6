"""How the probes' results become the `started` and `ready` of a pod's container statuses.

The one seam between probing and pod status (the kubelet's prober manager UpdatePodStatus): the
status code builds the container statuses from the runtime, hands the PodStatus here, then
derives the pod's conditions from what this set.
"""

from __future__ import annotations

from typing import Callable

from pykubelet.api.pod import Pod
from pykubelet.api.pod_status import ContainerStatus, PodStatus, Terminated

StartedReady = Callable[[str], tuple[bool, bool]]
"""Container ID (without scheme) -> (started, ready) as its probes say so far."""


def _no_probes(_: str) -> tuple[bool, bool]:
    return True, True


def _set(status: ContainerStatus, results: StartedReady) -> None:
    if status.running:
        started, ready = results(status.runtime_id)
        status.started, status.ready = started, started and ready
    else:
        status.started, status.ready = False, False


def update_pod_status(pod: Pod, status: PodStatus, results: StartedReady = _no_probes) -> None:
    """Set started/ready on every container status of `status`, in place."""
    for container in status.container_statuses:
        _set(container, results)
    sidecars = {c.name for c in pod.init_containers if c.is_sidecar}
    for container in status.init_container_statuses:
        if container.name in sidecars:
            _set(container, results)
        else:  # an init container is ready once it has finished successfully, not while it runs
            _set(container, results)
            container.ready = isinstance(container.state, Terminated) and container.state.exit_code == 0
    for container in status.ephemeral_container_statuses:
        container.ready, container.started = False, None
