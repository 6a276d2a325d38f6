"""Swap as the kubelet handles it: failSwapOn refuses a node whose /proc/swaps lists swap (with
the kubelet's words), and the containers' CRI resources carry NoSwap or LimitedSwap; plus the
settings that ask for them, checked as the kubelet checks them."""

from __future__ import annotations

import pytest

from pykubelet.api.pod import parse_pod
from pykubelet.config import ConfigError, Settings, load_config_file
from pykubelet.config.node_lifecycle import PriorityGracePeriod, SwapSettings
from pykubelet.runtime import swap
from pykubelet.runtime.resources import linux_resources

GI = 2**30
HEADER = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
ONE_SWAP_FILE = HEADER + "/swapfile                               file\t\t1048572\t\t0\t\t-2\n"


@pytest.mark.parametrize("text, on", [(HEADER, False), (ONE_SWAP_FILE, True), ("", False),
                                      (HEADER + "/dev/vda2 partition 2097148 0 -2\n/swapfile file 1 0 -3\n", True)])
def test_swap_is_on_when_proc_swaps_lists_anything_below_its_header(text, on):
    assert swap.swap_on(text) is on


def read_facts(tmp_path, monkeypatch, proc_swaps: str, settings: SwapSettings, unified: bool = True):
    (tmp_path / "swaps").write_text(proc_swaps)
    monkeypatch.setattr(swap, "PROC_SWAPS", str(tmp_path / "swaps"))
    return swap.read_swap_facts(settings, str(tmp_path / "cgroup"), unified, 4 * GI, GI)


def test_fail_swap_on_refuses_a_node_with_swap_in_the_kubelets_words(tmp_path, monkeypatch):
    with pytest.raises(swap.SwapError) as caught:
        read_facts(tmp_path, monkeypatch, ONE_SWAP_FILE, SwapSettings())
    assert str(caught.value) == ("running with swap on is not supported, please disable swap or set --fail-swap-on "
                                 "flag to false")
    assert read_facts(tmp_path, monkeypatch, HEADER, SwapSettings()).swap_capacity == GI  # no swap: fine
    assert read_facts(tmp_path, monkeypatch, ONE_SWAP_FILE, SwapSettings(fail_swap_on=False)).limited is False
    with pytest.raises(swap.SwapError, match="only supported with cgroupv2"):
        read_facts(tmp_path, monkeypatch, HEADER, SwapSettings(swap_behavior="LimitedSwap"), unified=False)


def container_pod(requests=None, limits=None, priority=None):
    spec: dict = {"containers": [{"name": "c", "image": "busybox",
                                  "resources": {k: v for k, v in (("requests", requests), ("limits", limits)) if v}}]}
    if priority is not None:
        spec["priority"] = priority
    return parse_pod({"metadata": {"name": "p", "namespace": "default", "uid": "u"}, "spec": spec}, "t")


def resources(pod, facts):
    return linux_resources(pod, pod.containers[0], 4 * GI, facts)


V2 = swap.SwapFacts(controller=True, unified=True, memory_capacity=4 * GI, swap_capacity=GI)


def test_no_swap_on_cgroup_v2_sets_memory_swap_max_to_zero_for_every_container():
    for pod in (container_pod(), container_pod({"memory": "1Gi"}, {"memory": "2Gi"})):
        assert dict(resources(pod, V2).unified) == {"memory.swap.max": "0"}


def test_no_swap_on_cgroup_v1_makes_the_memory_and_swap_limit_the_memory_limit():
    v1 = swap.SwapFacts(controller=True, unified=False)
    limited = resources(container_pod({"memory": "256Mi"}, {"memory": "512Mi"}), v1)
    assert limited.memory_swap_limit_in_bytes == limited.memory_limit_in_bytes == 512 * 2**20
    assert not limited.unified


def test_without_a_swap_controller_nothing_is_set():
    unset = resources(container_pod({"memory": "256Mi"}, {"memory": "512Mi"}), swap.SwapFacts(controller=False))
    assert (unset.memory_swap_limit_in_bytes, dict(unset.unified)) == (0, {})


def test_limited_swap_gives_a_burstable_container_its_requests_share_of_the_nodes_swap():
    limited = swap.SwapFacts(controller=True, unified=True, limited=True, memory_capacity=4 * GI, swap_capacity=GI)
    burstable = container_pod({"memory": "1Gi"}, {"memory": "2Gi"})
    assert resources(burstable, limited).unified["memory.swap.max"] == str(GI // 4)  # 1/4 of memory: 1/4 of swap
    # not for Guaranteed, critical, or BestEffort pods, nor a request equal to the limit
    for pod in (container_pod({"memory": "1Gi", "cpu": "1"}, {"memory": "1Gi", "cpu": "1"}),
                container_pod({"memory": "1Gi"}, {"memory": "2Gi"}, priority=2_000_000_000),
                container_pod(), container_pod({"memory": "1Gi", "cpu": "1"}, {"memory": "1Gi"})):
        assert resources(pod, limited).unified["memory.swap.max"] == "0"
    # a request above the node's memory cannot be computed: no swap
    assert resources(container_pod({"memory": "5Gi"}, {"memory": "6Gi"}), limited).unified["memory.swap.max"] == "0"


def write_config(tmp_path, text: str):
    path = tmp_path / "kubelet.yaml"
    path.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n" + text)
    return path


def test_the_swap_and_shutdown_fields_are_read_from_the_config_file(tmp_path):
    s = Settings()
    load_config_file(str(write_config(tmp_path, "failSwapOn: false\nmemorySwap: {swapBehavior: LimitedSwap}\n"
                                                "shutdownGracePeriod: 30s\nshutdownGracePeriodCriticalPods: 10s\n")),
                     s)
    assert (s.swap.fail_swap_on, s.swap.swap_behavior) == (False, "LimitedSwap")
    assert (s.shutdown.grace_period, s.shutdown.grace_period_critical_pods) == (30, 10)
    assert Settings().swap.fail_swap_on is True  # the kubelet's default
    load_config_file(str(write_config(tmp_path, "shutdownGracePeriodByPodPriority:\n"
                                                "- {priority: 0, shutdownGracePeriodSeconds: 20}\n")), s := Settings())
    assert s.shutdown.by_pod_priority == [PriorityGracePeriod(0, 20)]


@pytest.mark.parametrize("line, field", [
    ("memorySwap: {swapBehavior: UnlimitedSwap}", "memorySwap.swapBehavior"),
    ("shutdownGracePeriod: soon", "shutdownGracePeriod"),
    ("shutdownGracePeriodByPodPriority: [{priority: high, shutdownGracePeriodSeconds: 5}]",
     "shutdownGracePeriodByPodPriority"),
])
def test_a_bad_swap_or_shutdown_field_is_an_error_naming_it(tmp_path, line, field):
    path = write_config(tmp_path, line + "\n")
    with pytest.raises(ConfigError) as caught:
        load_config_file(str(path), Settings())
    assert str(path) in str(caught.value) and f"field {field}" in str(caught.value)


@pytest.mark.parametrize("flags, problem", [
    (["shutdownGracePeriod: 10s", "shutdownGracePeriodCriticalPods: 20s"], "must be <= shutdownGracePeriod"),
    (["shutdownGracePeriod: 500ms"], "must be 0 or at least 1s"),
    (["shutdownGracePeriod: 10s", "shutdownGracePeriodByPodPriority: [{priority: 0, shutdownGracePeriodSeconds: 5}]"],
     "cannot be set together"),
])
def test_shutdown_settings_that_contradict_each_other_stop_the_start(tmp_path, flags, problem):
    from pykubelet.config import build_parser, settings_from_args

    path = write_config(tmp_path, "\n".join(flags) + "\n")
    with pytest.raises(ConfigError, match=problem):
        settings_from_args(build_parser().parse_args([f"--config={path}", "--hostname-override=n1"]))


def test_configz_shows_the_swap_and_shutdown_settings_as_the_config_file_spells_them():
    import json

    from pykubelet.server.configz import kubelet_config

    s = Settings()
    s.swap.fail_swap_on, s.swap.swap_behavior = False, "LimitedSwap"
    s.shutdown.by_pod_priority = [PriorityGracePeriod(0, 20), PriorityGracePeriod(2_000_000_000, 5)]
    served = json.loads(json.dumps(kubelet_config(s)))["kubeletconfig"]
    assert (served["failSwapOn"], served["memorySwap"]) == (False, {"swapBehavior": "LimitedSwap"})
    assert served["shutdownGracePeriodByPodPriority"] == [
        {"priority": 0, "shutdownGracePeriodSeconds": 20},
        {"priority": 2_000_000_000, "shutdownGracePeriodSeconds": 5}]
    assert served["shutdownGracePeriod"] == "0s"


async def test_an_agent_on_a_node_with_swap_and_fail_swap_on_does_not_start(tmp_path, monkeypatch):
    from pykubelet.assembly.node_lifecycle_part import node_swap
    from pykubelet.util.tasks import LoopDied

    (tmp_path / "swaps").write_text(ONE_SWAP_FILE)
    monkeypatch.setattr(swap, "PROC_SWAPS", str(tmp_path / "swaps"))
    with pytest.raises(LoopDied, match="^failed to run Kubelet: running with swap on is not supported"):
        await node_swap(Settings(), 4 * GI, str(tmp_path))
    s = Settings()
    s.swap.fail_swap_on = False
    assert (await node_swap(s, 4 * GI, str(tmp_path))).limited is False  # runs on, with NoSwap
