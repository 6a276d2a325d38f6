"""Whether the node admits a pod next to the ones it runs, with the kubelet's reasons and messages."""

from __future__ import annotations

from typing import Any

import pytest

from pykubelet.api.pod import Pod, parse_pod
from pykubelet.pods.admission import Allocatable, Rejection, admit

NODE = "node-1"
MI = 2**20
NODE_SIZE = Allocatable(pods=110, cpu_millis=2000, memory_bytes=4096 * MI)

PORTS_TAKEN = Rejection("NodePorts",
                        "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports")
WRONG_NODE = Rejection("NodeName", "Predicate NodeName failed: node(s) didn't match the requested node name")


def make_pod(name: str = "p", requests: dict[str, str] | None = None, limits: dict[str, str] | None = None,
             ports: list[dict[str, Any]] | None = None, node_name: str = "", host_network: bool = False,
             containers: int = 1) -> Pod:
    resources = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    container = {"name": "app", "image": "busybox:1.36", "resources": resources, "ports": ports or []}
    spec: dict[str, Any] = {"containers": [dict(container, name=f"c{i}") for i in range(containers)],
                            "hostNetwork": host_network}
    if node_name:
        spec["nodeName"] = node_name
    return parse_pod({"metadata": {"name": name, "uid": f"uid-{name}"}, "spec": spec}, where="test")


def running(*requests: dict[str, str]) -> list[Pod]:
    return [make_pod(f"r{i}", requests=r) for i, r in enumerate(requests)]


def port(host_port: int, protocol: str = "", host_ip: str = "", container_port: int = 80) -> dict[str, Any]:
    p: dict[str, Any] = {"containerPort": container_port, "hostPort": host_port}
    if protocol:
        p["protocol"] = protocol
    if host_ip:
        p["hostIP"] = host_ip
    return p


def test_pod_that_fits_is_admitted():
    assert admit(make_pod(requests={"cpu": "500m", "memory": "1Gi"}), running({"cpu": "1", "memory": "1Gi"}),
                 NODE, NODE_SIZE) is None


def test_pod_beyond_max_pods_is_out_of_pods():
    node = Allocatable(pods=3, cpu_millis=2000, memory_bytes=4096 * MI)
    assert admit(make_pod(), running({}, {}, {}), NODE, node) == Rejection(
        "OutOfpods", "Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3")


def test_last_free_pod_slot_is_usable():
    node = Allocatable(pods=3, cpu_millis=2000, memory_bytes=4096 * MI)
    assert admit(make_pod(), running({}, {}), NODE, node) is None


def test_cpu_shortage_names_millicores_requested_used_and_capacity():
    assert admit(make_pod(requests={"cpu": "500m"}), running({"cpu": "1"}, {"cpu": "800m"}), NODE,
                 NODE_SIZE) == Rejection(
        "OutOfcpu", "Node didn't have enough resource: cpu, requested: 500, used: 1800, capacity: 2000")


def test_memory_shortage_names_bytes_requested_used_and_capacity():
    assert admit(make_pod(requests={"memory": "1Gi"}), running({"memory": "3584Mi"}), NODE,
                 NODE_SIZE) == Rejection(
        "OutOfmemory",
        "Node didn't have enough resource: memory, requested: 1073741824, used: 3758096384, capacity: 4294967296")


def test_pod_filling_the_node_exactly_is_admitted():
    assert admit(make_pod(requests={"cpu": "200m", "memory": "512Mi"}),
                 running({"cpu": "1800m", "memory": "3584Mi"}), NODE, NODE_SIZE) is None


def test_common_millicore_requests_fill_the_node_exactly():
    """1300m + 700m is the whole of 2 CPUs: no rounding may push it over."""
    assert admit(make_pod(requests={"cpu": "700m"}), running({"cpu": "1300m"}), NODE, NODE_SIZE) is None


def test_requests_of_all_containers_add_up():
    pod = make_pod(requests={"cpu": "600m"}, containers=2)
    assert admit(pod, running({"cpu": "1"}), NODE, NODE_SIZE) == Rejection(
        "OutOfcpu", "Node didn't have enough resource: cpu, requested: 1200, used: 1000, capacity: 2000")


def test_pod_without_requests_fits_a_full_node():
    assert admit(make_pod(), running({"cpu": "2", "memory": "4Gi"}), NODE, NODE_SIZE) is None


def test_pod_asking_only_for_memory_fits_however_busy_the_cpu_is():
    assert admit(make_pod(requests={"memory": "1Gi"}), running({"cpu": "2"}), NODE, NODE_SIZE) is None


def test_limits_stand_in_for_missing_requests():
    pod = make_pod(limits={"cpu": "500m", "memory": "256Mi"})
    assert admit(pod, running({"cpu": "1800m"}), NODE, NODE_SIZE) == Rejection(
        "OutOfcpu", "Node didn't have enough resource: cpu, requested: 500, used: 1800, capacity: 2000")


def test_running_pods_limits_count_as_their_requests():
    others = [make_pod("r", limits={"memory": "4Gi"})]
    assert admit(make_pod(requests={"memory": "1Mi"}), others, NODE, NODE_SIZE) == Rejection(
        "OutOfmemory",
        "Node didn't have enough resource: memory, requested: 1048576, used: 4294967296, capacity: 4294967296")


def test_explicit_request_wins_over_limit():
    pod = make_pod(requests={"cpu": "100m"}, limits={"cpu": "4"})
    assert admit(pod, running({"cpu": "1800m"}), NODE, NODE_SIZE) is None


def test_pod_bound_to_another_node_is_rejected():
    assert admit(make_pod(node_name="node-2"), [], NODE, NODE_SIZE) == WRONG_NODE


@pytest.mark.parametrize("node_name", ["", NODE])
def test_pod_bound_to_this_node_or_unbound_is_admitted(node_name):
    assert admit(make_pod(node_name=node_name), [], NODE, NODE_SIZE) is None


@pytest.mark.parametrize("wanted, used", [
    (port(8080), port(8080)),                                                  # both on every address
    (port(8080, host_ip="10.0.0.1"), port(8080, host_ip="10.0.0.1")),          # the same address
    (port(8080, host_ip="10.0.0.1"), port(8080)),                              # taken on every address
    (port(8080), port(8080, host_ip="10.0.0.1")),                              # wants every address
    (port(8080, host_ip="0.0.0.0"), port(8080, host_ip="10.0.0.1")),
    (port(8080, "TCP"), port(8080)),                                           # TCP is the default
    (port(53, "UDP"), port(53, "UDP")),
    (port(8080, container_port=80), port(8080, container_port=9090)),          # only the host side counts
], ids=["any-any", "same-ip", "ip-vs-any", "any-vs-ip", "explicit-any", "default-tcp", "udp", "container-port"])
def test_host_port_already_taken_is_rejected(wanted, used):
    others = [make_pod("other", ports=[used])]
    assert admit(make_pod(ports=[wanted]), others, NODE, NODE_SIZE) == PORTS_TAKEN


@pytest.mark.parametrize("wanted, used", [
    (port(8080), port(8081)),
    (port(53, "UDP"), port(53, "TCP")),
    (port(8080, "SCTP"), port(8080)),
    (port(8080, host_ip="10.0.0.1"), port(8080, host_ip="10.0.0.2")),
    (port(0, container_port=8080), port(0, container_port=8080)),              # no host port at all
], ids=["other-port", "other-protocol", "sctp", "other-ip", "no-host-port"])
def test_host_ports_that_do_not_overlap_are_admitted(wanted, used):
    others = [make_pod("other", ports=[used])]
    assert admit(make_pod(ports=[wanted]), others, NODE, NODE_SIZE) is None


def test_host_network_pods_on_the_same_container_port_conflict():
    """The API defaults hostPort to containerPort for hostNetwork pods, so they hold that port on the node."""
    others = [make_pod("other", host_network=True, ports=[{"containerPort": 8080}])]
    pod = make_pod(host_network=True, ports=[{"containerPort": 8080}])
    assert admit(pod, others, NODE, NODE_SIZE) == PORTS_TAKEN


def test_host_network_pod_conflicts_with_a_host_port_on_its_container_port():
    others = [make_pod("other", ports=[port(8080)])]
    pod = make_pod(host_network=True, ports=[{"containerPort": 8080}])
    assert admit(pod, others, NODE, NODE_SIZE) == PORTS_TAKEN


@pytest.mark.parametrize("pod, others, node, reason", [
    # everything wrong at once: pods come first
    (make_pod(requests={"cpu": "3", "memory": "8Gi"}, node_name="node-2", ports=[port(80)]),
     [make_pod("other", ports=[port(80)])], Allocatable(1, 2000, 4096 * MI), "OutOfpods"),
    # cpu before memory
    (make_pod(requests={"cpu": "3", "memory": "8Gi"}), [], NODE_SIZE, "OutOfcpu"),
    # resources before the node name
    (make_pod(requests={"memory": "8Gi"}, node_name="node-2"), [], NODE_SIZE, "OutOfmemory"),
    # the node name before host ports
    (make_pod(node_name="node-2", ports=[port(80)]), [make_pod("other", ports=[port(80)])], NODE_SIZE,
     "NodeName"),
], ids=["pods-first", "cpu-before-memory", "resources-before-node-name", "node-name-before-ports"])
def test_the_first_failing_check_is_the_reason_given(pod, others, node, reason):
    rejection = admit(pod, others, NODE, node)
    assert rejection is not None and rejection.reason == reason


def test_a_pod_for_another_os_is_rejected_by_its_os_field_or_label():
    windows = parse_pod({"metadata": {"name": "w"}, "spec": {"os": {"name": "windows"}, "containers": [
        {"name": "app", "image": "busybox:1.36"}]}}, where="test")
    assert admit(windows, [], NODE, NODE_SIZE) == Rejection(
        "PodOSNotSupported", "Failed to admit pod as the OS field doesn't match node OS")
    labelled = parse_pod({"metadata": {"name": "w", "labels": {"kubernetes.io/os": "windows"}},
                          "spec": {"containers": [{"name": "app", "image": "busybox:1.36"}]}}, where="test")
    assert admit(labelled, [], NODE, NODE_SIZE).reason == "PodOSSelectorNodeLabelDoesNotMatch"
    linux = parse_pod({"metadata": {"name": "l", "labels": {"kubernetes.io/os": "linux"}},
                       "spec": {"os": {"name": "linux"}, "containers": [{"name": "app", "image": "b"}]}}, where="t")
    assert admit(linux, [], NODE, NODE_SIZE) is None
