"""The CI part of `make conformance-cluster`: a fixed sample of e2e.test's [Conformance] specs that
need a cluster rather than one node (pods reaching each other across nodes through flannel,
Services through pykubelet proxy, names through CoreDNS), on this tier's cluster.

The full run builds a cluster of its own (about 5 minutes before its first spec). By the time
this module runs, the tier's cluster is that cluster with one worker less: pykubelet nodes made
with kubeadm init and join, flannel, CoreDNS, and pykubelet-proxy in kube-proxy's place
(test_addons.py, which pytest runs before this module, ends with that swap). The specs spread
their pods over every schedulable node, and a cluster of one schedulable worker would keep them
on one, so a second worker joins for them and leaves afterwards (kubeadm reset, its Node deleted):
test_kubeadm.py finds the cluster it expects. The suite runs from inside the control-plane node's
network namespace, as in the full run.
"""

from __future__ import annotations

import re

from tests.conformance import suite
from tests.conformance.cluster import RESULTS, SAMPLE, SAMPLE_SPECS
from tests.conformance.cluster_bed import import_e2e_images, suite_target
from tests.kubeadm.conftest import ControlPlane, joined_worker
from tests.kubeadm.node import KubeadmNode

PROCS = 2
TIMEOUT = "25m"  # ginkgo's limit for the sample (a few minutes when it passes)


def test_a_sample_of_the_conformance_specs_across_nodes_passes(control_plane: ControlPlane, worker: KubeadmNode):
    cp = control_plane.node
    with joined_worker(control_plane, "pkl-kadm-w2", 3) as second:
        for node in (worker, second):
            import_e2e_images(node)
        admin = cp.state / "admin.conf"
        admin.write_bytes(cp.read("/etc/kubernetes/admin.conf"))
        results_dir = RESULTS / "ci-sample"
        results = suite.run(results_dir, SAMPLE, "", PROCS, len(SAMPLE_SPECS), TIMEOUT,
                            target=suite_target(cp, admin))
    assert all(re.search(SAMPLE, r.name) for r in results)
    problems = suite.problems(results, SAMPLE_SPECS)
    assert not problems, (f"{len(problems)} of {len(SAMPLE_SPECS)} [Conformance] specs of the sample did not pass "
                          f"on the pykubelet cluster (JUnit, logs: {results_dir}):\n" + "\n".join(problems))
