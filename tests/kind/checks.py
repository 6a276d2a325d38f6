"""What a user checks of a new kind cluster, one function a step, each failing with what it saw:
every node Ready; kube-system's and the CNI's pods ready; an image loaded into every node; a pod
on each node whose logs, exec (across nodes, by ping and HTTP) and port-forward work; and
`kind delete cluster` leaving no container or volume of the cluster behind.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import urllib.request
from pathlib import Path

from tests.helpers import run_to_completion, wait_for
from tests.kind.cluster import ENV, KIND, KUBECTL, KindCluster, ready, run, volumes

# The pod each node runs: says hello, then serves a page on 8080
HELLO_AND_SERVE = 'echo "hello from $(hostname)"; mkdir -p /www; echo served >/www/index.html; httpd -f -p 8080 -h /www'
FORWARD_PORT = 18080


def nodes_ready(cluster: KindCluster, count: int = 2, timeout: float = 180) -> dict[str, str]:
    """Every node Ready; their names and kubelet versions."""
    def all_ready() -> dict[str, str] | None:
        nodes = cluster.get("nodes")["items"]
        if len(nodes) == count and all(ready(node) for node in nodes):
            return {n["metadata"]["name"]: n["status"]["nodeInfo"]["kubeletVersion"] for n in nodes}
        return None
    return cluster.wait(all_ready, timeout, f"{count} nodes Ready")


def system_pods_ready(cluster: KindCluster, timeout: float = 180) -> int:
    """kube-system's pods and flannel's (the CNI the node images carry) ready; how many."""
    def all_ready() -> int:
        pods = [p for p in cluster.get("pods", "-A")["items"]
                if p["metadata"]["namespace"] == "kube-system" or p["metadata"].get("labels", {}).get("app") == "flannel"]
        flannel = [p for p in pods if p["metadata"].get("labels", {}).get("app") == "flannel"]
        return len(pods) if flannel and all(ready(p) for p in pods) else 0
    return cluster.wait(all_ready, timeout, "kube-system's and flannel's pods ready")


def load_image_archive(cluster: KindCluster, archive: Path) -> None:
    run(KIND, "load", "image-archive", archive, "--name", cluster.name, timeout=180)


def load_docker_image(cluster: KindCluster, image: str) -> None:
    run(KIND, "load", "docker-image", image, "--name", cluster.name, timeout=180)


def pod_per_node(cluster: KindCluster, image: str, prefix: str = "bb", timeout: float = 120) -> dict[str, str]:
    """A pod of `image` (already on the nodes) pinned to each node, Ready; node name → pod IP."""
    nodes = sorted(cluster.get("nodes")["items"], key=lambda n: n["metadata"]["name"])
    for node in nodes:
        name = node["metadata"]["name"]
        cluster.kubectl("run", f"{prefix}-{name}", f"--image={image}", "--image-pull-policy=Never",
                        "--restart=Never", f"--overrides={json.dumps({'spec': {'nodeName': name}})}",
                        "--", "sh", "-c", HELLO_AND_SERVE)

    def all_ready() -> dict[str, str] | None:
        pods = {p["metadata"]["name"]: p for p in cluster.get("pods")["items"]}
        mine = [pods.get(f"{prefix}-{n['metadata']['name']}") for n in nodes]
        if all(p is not None and ready(p) for p in mine):
            return {p["spec"]["nodeName"]: p["status"]["podIP"] for p in mine if p is not None}
        return None
    return cluster.wait(all_ready, timeout, f"a {image} pod Ready on each node")


def logs_show_output(cluster: KindCluster, pods: list[str]) -> None:
    for pod in pods:
        out = cluster.kubectl("logs", pod).strip()
        assert out == f"hello from {pod}", f"kubectl logs {pod}: expected 'hello from {pod}', got {out!r}"


def exec_reaches(cluster: KindCluster, pod: str, ip: str) -> None:
    """From `pod`, through `kubectl exec`: `ip` answers ping and serves the page on 8080."""
    pinged = cluster.kubectl("exec", pod, "--", "ping", "-c", "2", "-W", "2", ip, check=False)
    assert " 0% packet loss" in pinged, f"{pod} cannot ping {ip}: {pinged!r}"
    page = cluster.kubectl("exec", pod, "--", "wget", "-q", "-O", "-", f"http://{ip}:8080/", check=False).strip()
    assert page == "served", f"wget http://{ip}:8080/ from {pod}: expected 'served', got {page!r}"


def port_forward_reaches(cluster: KindCluster, pod: str) -> None:
    """`kubectl port-forward` to the pod's 8080 serves its page on this machine."""
    with tempfile.TemporaryFile("w+") as log:
        forward = subprocess.Popen([str(KUBECTL), "--kubeconfig", str(cluster.kubeconfig), "port-forward",
                                    f"pod/{pod}", f"{FORWARD_PORT}:8080"], stdout=log, stderr=subprocess.STDOUT,
                                   env=ENV)
        try:
            def forwarding() -> bool:
                log.seek(0)
                return "Forwarding" in log.read()
            run_to_completion(wait_for(forwarding, 30, f"kubectl port-forward pod/{pod} to listen",
                                       interval=0.2, describe=lambda: (log.seek(0), log.read())[1]))
            with urllib.request.urlopen(f"http://127.0.0.1:{FORWARD_PORT}/", timeout=10) as answer:
                page = answer.read().decode().strip()
            assert page == "served", f"port-forward to {pod}: expected 'served', got {page!r}"
        finally:
            forward.kill()
            forward.wait()


def delete_leaves_nothing(cluster: KindCluster, volumes_before: set[str]) -> None:
    cluster.delete()
    left = cluster.containers()
    assert not left, f"kind delete cluster {cluster.name} left containers {left}"
    new_volumes = volumes() - volumes_before
    assert not new_volumes, f"kind delete cluster {cluster.name} left volumes {sorted(new_volumes)}"
