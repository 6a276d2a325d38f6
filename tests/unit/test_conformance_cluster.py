"""`make conformance-cluster`'s selection and the command it runs the suite with."""

from __future__ import annotations

import pathlib
import re

from tests.conformance import suite
from tests.conformance.cluster import FOCUS, SAMPLE, SKIP

# The specs a dry run lists for the sample's words, with their labels, as e2e.test v1.36.3 names them
NAMED_LIKE_THE_SAMPLE = {
    "[sig-network] DNS should provide DNS for the cluster [Conformance] [sig-network, Conformance]": True,
    "[sig-network] DNS should provide DNS for the cluster [Provider:GCE] [sig-network]": False,
    "[sig-network] Networking Granular Checks: Pods should function for intra-pod communication: http "
    "[NodeConformance] [Conformance] [sig-network, NodeConformance, Conformance]": True,
    "[sig-network] Networking Granular Checks: Pods should function for node-pod communication: http "
    "[LinuxOnly] [NodeConformance] [Conformance] [sig-network, NodeConformance, Conformance]": True,
    "[sig-network] Networking Granular Checks: Pods should function for intra-pod communication: udp "
    "[NodeConformance] [Conformance] [sig-network, NodeConformance, Conformance]": False,
    "[sig-network] Services should serve a basic endpoint from pods [Conformance] [sig-network, Conformance]": True,
    "[sig-network] DNS should provide DNS for services [Conformance] [sig-network, Conformance]": True,
    "[sig-network] DNS should provide DNS for ExternalName services [Conformance] [sig-network, Conformance]": False,
}


def test_the_sample_holds_its_conformance_specs_and_no_other():
    for name, selected in NAMED_LIKE_THE_SAMPLE.items():
        assert bool(re.search(SAMPLE, name)) is selected, name


def test_certifications_selection_skips_nothing_and_ginkgo_is_not_given_an_empty_skip():
    # ginkgo compiles --skip= to a pattern that matches every spec: the whole run would be skipped
    argv = suite.ginkgo_argv(pathlib.Path("/out"), FOCUS, SKIP, 2)
    assert SKIP == "" and not [a for a in argv if a.startswith("--skip")]
    assert f"--focus={FOCUS}" in argv and "--procs=2" in argv
    assert "--skip=a|b" in suite.ginkgo_argv(pathlib.Path("/out"), FOCUS, "a|b", 2)


def test_the_suite_runs_in_the_targets_namespace_with_its_kubeconfig():
    target = suite.Target(kubeconfig=pathlib.Path("/k/admin.conf"), prefix=("nsenter", "--net=/var/run/netns/cp", "--"),
                          extra_args=("--kubectl-path=/bin/kubectl",))
    argv = suite.ginkgo_argv(pathlib.Path("/out"), FOCUS, SKIP, 1, target=target)
    assert argv[:3] == ["nsenter", "--net=/var/run/netns/cp", "--"] and argv[3].endswith("/ginkgo")
    e2e_args = argv[len(argv) - argv[::-1].index("--"):]  # after ginkgo's "--" (the last)
    assert e2e_args[0] == "--kubeconfig=/k/admin.conf" and e2e_args[-1] == "--kubectl-path=/bin/kubectl"
