"""`kind create cluster` on the pykubelet node image: both nodes run pykubelet, and the cluster
passes a user's checks (tests/kind/smoke.py), `kind load docker-image` included, and kind's
default storage class serves a claim on a pykubelet node (tests/kind/storage.py)."""

from __future__ import annotations

from tests import progress
from tests.kind import checks, storage
from tests.kind.cluster import PYKUBELET_IMAGE, cached_image, docker, docker_image_exists, load_oci_archive, \
    runs_pykubelet, volumes
from tests.kind.smoke import BUSYBOX, Steps, check_cluster

LOADED = "pykubelet.test/kind-load:busybox"  # a name no node image has: only `kind load` puts it there


def test_a_cluster_of_pykubelet_nodes(kind_cluster):
    cluster = kind_cluster("pkl-kind", PYKUBELET_IMAGE, PYKUBELET_IMAGE)
    step = Steps(cluster.name, lambda line: progress.say("kind", line))
    volumes_before = volumes()
    step(f"kind create cluster: two nodes on {PYKUBELET_IMAGE} (took {cluster.create():.0f}s)")
    for node in (f"{cluster.name}-control-plane", f"{cluster.name}-worker"):
        assert runs_pykubelet(node), f"node {node}'s /usr/bin/kubelet is not pykubelet"
    check_cluster(cluster, step)

    worker = f"{cluster.name}-worker"
    volume = storage.claim_keeps_data(cluster, worker, BUSYBOX)
    step(f"a claim of the default StorageClass {storage.STORAGE_CLASS} bound on {worker} ({volume}); "
         "a second pod read what the first wrote")
    storage.claim_deleted_removes_volume(cluster, worker, volume)
    step(f"the claim deleted: its volume and its directory on {worker} gone")

    had_image = docker_image_exists(LOADED)
    if not had_image:
        load_oci_archive(cached_image("busybox-1.36"), LOADED)
    try:
        checks.load_docker_image(cluster, LOADED)
        step(f"kind load docker-image {LOADED}")
        ips = checks.pod_per_node(cluster, LOADED, prefix="loaded")
        checks.logs_show_output(cluster, [f"loaded-{node}" for node in ips])
        step(f"a pod of {LOADED} on each node Ready, its logs shown")
    finally:
        if not had_image:
            docker("rmi", LOADED)

    checks.delete_leaves_nothing(cluster, volumes_before)
    step("kind delete cluster: no container or volume of it left")
