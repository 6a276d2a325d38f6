"""A sample of the runtime tier on containerd 2.x, in every `make test` (`make test-containerd2` runs
the whole tier there): a containerd 2.x of the module's own (tests/bed/containerd-node.sh
--containerd2; built by `make containerd2`), and pykubelet using what 2.x offers: container exits
pushed through CRI GetContainerEvents, the cgroup driver from RuntimeConfig, the sandbox image
pinned (the version 3 config's pinned_images), the node Ready although 2.x reports a
deprecation condition on this cgroup v1 host, and /metrics/cadvisor from CRI ListPodSandboxMetrics."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.node.status import NodeHealth, observe_runtime_conditions
from tests.helpers import wait_for
from tests.runtime.containerd2 import clean_client, containerd2
from tests.runtime.conftest import NODE, AgentProcess, main_status, phase, pod_manifest, write_manifest
from tests.runtime.test_kubelet_api_local import OPEN, get

NAME = "pkl-cd2-sample"


@pytest.fixture(scope="module")
def endpoint():
    with containerd2(NAME) as cri_endpoint:
        yield cri_endpoint


@pytest.fixture
async def cri2(endpoint):
    async with clean_client(endpoint) as client:
        yield client


async def test_it_is_containerd_2_with_the_calls_1_6_lacks(cri2):
    version = await cri2.version()
    assert version.runtime_name == "containerd" and version.runtime_version.startswith("v2."), version
    config = await cri2.runtime_config()
    assert config.HasField("linux") and config.linux.cgroup_driver == api.CGROUPFS  # SystemdCgroup = false
    # The sandbox image the image GC must never remove: 2.x's Status no longer names it (1.6's
    # sandboxImage), it pins the one the version 3 config names, and the GC keeps pinned images.
    pinned = {tag for image in await cri2.list_images() if image.pinned for tag in image.repo_tags}
    assert pinned == {"registry.k8s.io/pause:3.9"}, pinned
    status = await cri2.status(verbose=True)
    health = NodeHealth()
    observe_runtime_conditions(health, status.status.conditions)
    assert health.runtime_errors == [], health.runtime_errors


async def test_a_pod_runs_its_exit_is_pushed_and_the_runtimes_driver_is_used(cri2, endpoint, tmp_path):
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    probe = {"exec": {"command": ["true"]}, "periodSeconds": 1}
    write_manifest(manifests, "serve", pod_manifest("serve", "sleep 3600", readinessProbe=probe))
    write_manifest(manifests, "quits", pod_manifest("quits", "sleep 2; exit 3", restart_policy="Never"))
    # --cgroup-driver systemd: RuntimeConfig says cgroupfs, and the runtime's word wins.
    agent = AgentProcess(tmp_path, manifests, "--v", "4", "--cgroup-driver", "systemd", endpoint=endpoint).start()
    try:
        await agent.wait_pod(f"serve-{NODE}", lambda p: main_status(p).get("ready") is True, 60,
                             "Running and Ready (exec readiness probe)")
        quits = await agent.wait_pod(f"quits-{NODE}", lambda p: phase(p) == "Failed", 60, "Failed")
        assert main_status(quits)["state"]["terminated"]["exitCode"] == 3
        log = agent.log()
        assert "Using cgroup driver setting received from the CRI runtime" in log, log[-3000:]
        # The exit came through the CRI stream, not containerd's own events (1.6's path).
        assert "CONTAINER_STOPPED_EVENT" in log, log[-3000:]
    finally:
        agent.shutdown()


async def test_the_kubelet_api_serves_the_runtimes_pod_and_container_metrics(cri2, endpoint, tmp_path):
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    write_manifest(manifests, "measured", pod_manifest("measured", "sleep 3600"))
    agent = AgentProcess(tmp_path, manifests, *OPEN, endpoint=endpoint).start()
    try:
        await agent.wait_pod(f"measured-{NODE}", lambda p: "running" in main_status(p)["state"], 60, "running")
        pod_labels = {"pod": f"measured-{NODE}", "namespace": "default", "container": "main"}

        def the_containers_samples() -> dict[str, float] | None:
            code, page = get(agent, "/metrics/cadvisor")
            assert code == 200, (code, page[:2000])
            found = {s.name: s.value for family in text_string_to_metric_families(page) for s in family.samples
                     if pod_labels.items() <= s.labels.items()}
            return found if "container_memory_working_set_bytes" in found else None
        samples = await wait_for(the_containers_samples, 30, "the container's series on /metrics/cadvisor", 1,
                                 describe=agent.describe)
        assert samples["container_memory_working_set_bytes"] > 0, samples
        assert "container_cpu_usage_seconds_total" in samples, samples
        assert samples["container_start_time_seconds"] > 1_600_000_000, samples
    finally:
        agent.shutdown()
