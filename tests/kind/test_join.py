"""A pykubelet node joins a kind cluster of the real kubelet's: the control plane on
kindest/node, the worker on the pykubelet node image, joined by kind's own `kubeadm join`; pods
on both nodes reach each other (tests/kind/smoke.py's checks)."""

from __future__ import annotations

from tests import progress
from tests.kind import checks
from tests.kind.cluster import KUBELET_IMAGE, PYKUBELET_IMAGE, runs_pykubelet, volumes
from tests.kind.smoke import Steps, check_cluster


def test_a_pykubelet_worker_joins_a_kind_cluster(kind_cluster):
    cluster = kind_cluster("pkl-kind-join", KUBELET_IMAGE, PYKUBELET_IMAGE)
    step = Steps(cluster.name, lambda line: progress.say("kind", line))
    volumes_before = volumes()
    step(f"kind create cluster: control plane on {KUBELET_IMAGE}, worker on {PYKUBELET_IMAGE} "
         f"(took {cluster.create():.0f}s)")
    assert not runs_pykubelet(f"{cluster.name}-control-plane"), "the control plane should run the real kubelet"
    assert runs_pykubelet(f"{cluster.name}-worker"), "the joined worker's /usr/bin/kubelet is not pykubelet"
    ips = check_cluster(cluster, step)
    assert len(set(ips.values())) == 2, f"the two nodes' pods should have IPs of their own: {ips}"

    checks.delete_leaves_nothing(cluster, volumes_before)
    step("kind delete cluster: no container or volume of it left")
