"""A sample of the cluster tier on containerd 2.x, in every `make test`: the same tests as the
machine's containerd 1.6 gets (they are called, not copied), on a node whose containerd is a 2.x of
this module's own (tests/runtime/containerd2.py): a Deployment run and scaled to zero, exec through
the kubelet API, /stats/summary and /metrics/resource, an in-place resize (2.x's
UpdateContainerResources), and a private image pulled with its pull secret (2.x pulls through its
transfer service, not 1.6's CRI pull code)."""

from __future__ import annotations

import pathlib

import pytest

from tests.cluster import test_kubelet_api, test_pods, test_pull_secrets, test_resize
from tests.cluster.conftest import ready_node_agent
from tests.cluster.test_pull_secrets import private_image, registry  # noqa: F401  (fixtures)
from tests.runtime.containerd2 import clean_client, containerd2


@pytest.fixture(scope="module")
def endpoint2():
    with containerd2("pkl-cd2-cluster") as cri_endpoint:
        yield cri_endpoint


@pytest.fixture
async def cri2(endpoint2):
    async with clean_client(endpoint2) as client:
        yield client


@pytest.fixture
async def node_agent2(cluster, cri2, endpoint2, tmp_path: pathlib.Path):
    async with ready_node_agent(tmp_path, endpoint2) as agent:
        runtime = await cri2.version()
        assert runtime.runtime_version.startswith("v2."), runtime
        yield agent


async def test_a_deployment_runs_and_scales_to_zero_on_containerd_2(node_agent2, namespace, cri2):
    await test_pods.test_deployment_runs_on_the_node_and_scales_to_zero(node_agent2, namespace, cri2)


async def test_exec_streams_on_containerd_2(node_agent2, namespace):
    await test_kubelet_api.test_exec_streams_exit_codes_stdin_and_a_terminal(node_agent2, namespace)


async def test_stats_and_resource_metrics_on_containerd_2(node_agent2, namespace):
    await test_kubelet_api.test_stats_summary_and_resource_metrics_name_every_running_pod(node_agent2, namespace)


async def test_an_in_place_resize_on_containerd_2(node_agent2, cri2, namespace):
    await test_resize.test_cpu_and_memory_are_resized_in_place(node_agent2, cri2, namespace)


async def test_a_private_image_with_its_pull_secret_on_containerd_2(node_agent2, namespace, registry,  # noqa: F811
                                                                    private_image):  # noqa: F811
    await test_pull_secrets.test_a_private_image_pulls_with_its_secret_and_is_refused_without(
        node_agent2, namespace, registry, private_image)
