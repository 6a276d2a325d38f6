"""A pod never runs without one of its volumes: while one cannot be set up, no sandbox and no
container is made, the containers wait in ContainerCreating, a FailedMount event says which
volume and why, and the set-up is tried again with the kubelet's back-offs until it works."""

from __future__ import annotations

import asyncio
import pathlib

import pytest

from tests.unit.core.harness import Core, pod, until

pytestmark = pytest.mark.looptime


def record_events(node: Core) -> list[tuple[str, str, str]]:
    """The (type, reason, message) of every Event the pod path records from now on."""
    events: list[tuple[str, str, str]] = []
    node.deps.recorder.record = lambda ref, kind, reason, message: events.append((kind, reason, message))
    return events


def mounting(*names: str) -> list[dict]:
    mounts = [{"name": n, "mountPath": f"/{n}"} for n in names]
    return [{"name": "app", "image": "busybox:1.36", "volumeMounts": mounts}]


def failed_mounts(events: list[tuple[str, str, str]]) -> list[str]:
    return [message for kind, reason, message in events if (kind, reason) == ("Warning", "FailedMount")]


async def test_a_claim_keeps_the_pod_from_starting_with_the_kubelets_event_every_ten_seconds(node, tmp_path):
    events = record_events(node)
    volumes = [{"name": "scratch", "emptyDir": {}}, {"name": "data", "persistentVolumeClaim": {"claimName": "db"}}]
    node.dispatcher.set_pods([pod(containers=mounting("scratch", "data"), volumes=volumes)])
    await until(lambda: failed_mounts(events), what="a FailedMount event")
    assert failed_mounts(events)[0] == (
        "Unable to attach or mount volumes: unmounted volumes=[data scratch], unattached volumes=[], failed to "
        "process volumes=[data]: error processing PVC default/db: failed to fetch PVC from API server: "
        "no kubeClient defined")  # a standalone node cannot read claims
    await until(lambda: node.container().get("state", {}).get("waiting", {}).get("reason") == "ContainerCreating",
                what="the container waiting in ContainerCreating")
    await asyncio.sleep(35)
    assert 3 <= len(failed_mounts(events)) <= 5, "tried again after the pod worker's 10 s back-off"
    assert not node.runtime.sandboxes and not node.runtime.containers
    assert node.status()["phase"] == "Pending"
    # Nothing of the pod's other volumes is made while one cannot be processed.
    assert not (tmp_path / "root" / "pods" / "uid-web" / "volumes" / "kubernetes.io~empty-dir").exists()


async def test_a_failing_host_path_is_retried_with_back_off_and_the_pod_starts_once_it_works(node, tmp_path):
    events = record_events(node)
    host = tmp_path / "host-data"
    volumes = [{"name": "host", "hostPath": {"path": str(host), "type": "Directory"}},
               {"name": "scratch", "emptyDir": {}}]
    node.dispatcher.set_pods([pod(containers=mounting("host", "scratch"), volumes=volumes)])
    await until(lambda: len(failed_mounts(events)) >= 4, what="four tries")
    assert failed_mounts(events)[0] == (
        f'MountVolume.SetUp failed for volume "host" : hostPath type check failed: {host} is not a directory')
    assert not node.runtime.sandboxes and not node.runtime.containers
    assert node.container()["state"]["waiting"]["reason"] == "ContainerCreating"

    host.mkdir()
    started = asyncio.get_running_loop().time()
    await until(lambda: node.container().get("state", {}).get("running"), what="the container running")
    assert asyncio.get_running_loop().time() - started < 130, "within the longest volume back-off"
    assert node.runtime.sandboxes


async def test_a_pod_removed_while_its_volume_fails_leaves_nothing_behind(node, tmp_path):
    events = record_events(node)
    volumes = [{"name": "host", "hostPath": {"path": str(tmp_path / "nope"), "type": "Directory"}},
               {"name": "scratch", "emptyDir": {}}]
    node.dispatcher.set_pods([pod(containers=mounting("host", "scratch"), volumes=volumes)])
    await until(lambda: failed_mounts(events), what="a FailedMount event")
    pod_dir = pathlib.Path(tmp_path / "root" / "pods" / "uid-web")
    assert (pod_dir / "volumes" / "kubernetes.io~empty-dir" / "scratch").is_dir()  # the other one, set up

    node.dispatcher.set_pods([])
    await until(lambda: not pod_dir.exists(), what="the pod's directory removed")
    assert not node.runtime.sandboxes and not node.runtime.containers


async def test_a_sandbox_is_not_replaced_while_a_volume_cannot_be_set_up(node, tmp_path):
    events = record_events(node)
    host = tmp_path / "host-data"
    host.mkdir()
    volumes = [{"name": "host", "hostPath": {"path": str(host), "type": "Directory"}}]
    node.dispatcher.set_pods([pod(containers=mounting("host"), volumes=volumes)])
    await until(lambda: node.container().get("state", {}).get("running"), what="the container running")
    assert not failed_mounts(events)

    host.rmdir()
    node.runtime.kill_sandbox("uid-web")  # say, the node rebooted and the directory was on a tmpfs
    await until(lambda: failed_mounts(events), what="a FailedMount event")
    await asyncio.sleep(30)
    assert len(node.runtime.sandboxes) == 1, "no new sandbox while the volume is missing"
    assert not node.runtime.running("app")
