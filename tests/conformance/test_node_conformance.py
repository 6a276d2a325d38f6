"""A representative part of Kubernetes' own [NodeConformance] e2e specs, run on a pykubelet node.

The same run as `make conformance` (tests/conformance/run.py: its own control plane and node,
e2e.test v1.36.3 under ginkgo), focused on the specs below: logs and exec through the kubelet
API, probes, volumes, environment, lifecycle, security context and pod networking. It fails
naming every spec that did not pass, with the reason e2e.test gave. The first run on a machine
builds e2e.test (cached in /var/cache/pykubelet/e2e afterwards).
"""

from __future__ import annotations

import re

from tests.conformance import suite
from tests.conformance.run import RESULTS, conformance

CI_SPECS = (
    # logs and exec, through the kubelet API
    "[sig-node] Pods should support retrieving logs from the container over websockets",
    "[sig-node] Pods should support remote command execution over websockets",
    "[sig-node] Kubelet when scheduling a busybox command in a pod should print the output to logs",
    "[sig-node] Ephemeral Containers [NodeConformance] will start an ephemeral container in an existing pod",
    # probes
    '[sig-node] Probing container should be restarted with a exec "cat /tmp/health" liveness probe',
    "[sig-node] Probing container should be restarted with a /healthz http liveness probe",
    "[sig-node] Probing container should be restarted with a GRPC liveness probe",
    "[sig-node] Probing container should be ready immediately after startupProbe succeeds",
    # volumes
    "[sig-storage] ConfigMap should be consumable from pods in volume [NodeConformance]",
    "[sig-storage] Secrets should be consumable from pods in volume with mappings [NodeConformance]",
    "[sig-storage] Downward API volume should provide podname only",
    "[sig-storage] Downward API volume should update labels on modification",
    "[sig-storage] Projected combined should project all components that make up the projection API",
    "[sig-storage] EmptyDir volumes should support (non-root,0666,tmpfs)",
    "[sig-storage] EmptyDir volumes when FSGroup is specified [LinuxOnly] [NodeConformance] nonexistent volume "
    "subPath should have the correct mode and owner using FSGroup",
    "[sig-storage] HostPath should support subPath",
    # environment
    "[sig-node] ConfigMap should be consumable via the environment",
    "[sig-node] Secrets should be consumable via the environment",
    "[sig-node] Downward API should provide pod name, namespace and IP address as env vars",
    "[sig-node] Downward API should provide container's limits.cpu/memory and requests.cpu/memory as env vars",
    "[sig-node] Variable Expansion should allow composing env vars into new env vars",
    "[sig-node] Containers should be able to override the image's default command and arguments",
    "[sig-node] Pods should contain environment variables for services",
    # lifecycle
    "[sig-node] Container Lifecycle Hook when create a pod with lifecycle hook should execute poststart exec hook "
    "properly",
    "[sig-node] Container Lifecycle Hook when create a pod with lifecycle hook should execute prestop http hook "
    "properly",
    "[sig-node] Container Lifecycle Hook when create a pod with lifecycle hook should execute prestop https hook "
    "properly",
    "[sig-node] InitContainer [NodeConformance] should invoke init containers on a RestartNever pod",
    "[sig-node] InitContainer [NodeConformance] should not start app containers and fail the pod if init "
    "containers fail on a RestartNever pod",
    "[sig-node] Container Runtime blackbox test on terminated container should report termination message from "
    "log output if TerminationMessagePolicy FallbackToLogsOnError is set",
    "[sig-node] Pods should allow activeDeadlineSeconds to be updated",
    "[sig-node] Pods should support pod readiness gates",
    "[sig-node] PodOSRejection [NodeConformance] Kubelet [LinuxOnly] should reject pod when the node OS doesn't "
    "match pod's OS",
    # security context
    "[sig-node] Security Context When creating a container with runAsUser should run the container with uid 65534",
    "[sig-node] Security Context When creating a container with runAsNonRoot [NodeConformance] should run with an "
    "image specified user ID",
    "[sig-node] Security Context when creating containers with AllowPrivilegeEscalation should not allow privilege "
    "escalation when false",
    "[sig-node] Security Context When creating a pod with readOnlyRootFilesystem should run the container with "
    "readonly rootfs when readOnlyRootFilesystem=true",
    "[sig-node] Security Context When creating a pod with privileged should run the container as unprivileged when "
    "false",
    "[sig-node] Sysctls [LinuxOnly] [NodeConformance] should support sysctls [Environment:NotInUserNS]",
    "[sig-node] Sysctls [LinuxOnly] [NodeConformance] should not launch unsafe, but not explicitly enabled sysctls",
    # networking and names
    "[sig-network] Networking Granular Checks: Pods should function for intra-pod communication: http",
    "[sig-network] Networking Granular Checks: Pods should function for node-pod communication: udp",
    "[sig-node] KubeletManagedEtcHosts should test kubelet managed /etc/hosts file",
    "[sig-node] Kubelet when scheduling an agnhost Pod with hostAliases should write entries to /etc/hosts",
    "[sig-node] Pods should get a host IP",
    "[sig-node] Override hostname of Pod [NodeConformance] [FeatureGate:HostnameOverride] [Beta] a pod with only "
    "hostnameOverride field will have hostnameOverride as hostname",
)
PROCS = 2
TIMEOUT = "30m"  # ginkgo's limit for this part (it takes a few minutes)
# Every third spec runs on containerd 2.x (a containerd of the run's own, built by `make
# containerd2`), the rest on the machine's 1.6: each spec once, each group above on both lines,
# for the cost of one more control plane.
ON_CONTAINERD2 = CI_SPECS[::3]
ON_CONTAINERD1 = tuple(spec for spec in CI_SPECS if spec not in ON_CONTAINERD2)


def test_a_representative_part_of_node_conformance_passes_on_pykubelet():
    _all_pass(ON_CONTAINERD1, "ci")


def test_a_representative_part_of_node_conformance_passes_on_pykubelet_with_containerd_2(monkeypatch):
    monkeypatch.setenv("PYKUBELET_CONTAINERD", "2")  # the run's containerd-node.sh starts 2.x
    _all_pass(ON_CONTAINERD2, "ci-containerd2")
    agent_log = (RESULTS / "ci-containerd2" / "pykubelet.log").read_text()
    assert 'runtime="containerd://v2.' in agent_log, "the node did not run on containerd 2.x"


def _all_pass(specs: tuple[str, ...], results_name: str) -> None:
    focus = "|".join(re.escape(spec) for spec in specs)
    results = conformance("pykubelet", focus, suite.SKIP, PROCS, RESULTS / results_name, TIMEOUT)
    problems = suite.problems(results, specs)
    assert not problems, (f"{len(problems)} of {len(specs)} [NodeConformance] specs did not pass on pykubelet "
                          f"(JUnit, logs: {RESULTS / results_name}):\n" + "\n".join(problems))
