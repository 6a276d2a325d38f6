"""A kind cluster checked the way a user would, each step timed (tests/kind/checks.py's steps):

    python -m tests.kind.smoke IMAGE [NAME [WORKER_IMAGE]]

One control plane on node image IMAGE (kindest/node:v1.36.3 or pykubelet/kind-node:v1.36.3, from
tests/bed/build-kind-node.sh) and a worker on WORKER_IMAGE if given (a pykubelet node joining a
cluster of the real kubelet's, through kind's own `kubeadm join`): every node Ready, kube-system's
and the CNI's pods ready, `kind load image-archive` of the test bed's busybox, a pod on each node
(logs, exec across nodes by ping and HTTP, port-forward), then `kind delete cluster` leaving no
container or volume. The cluster is deleted however it ends; KIND_SMOKE_KEEP=1 keeps it (for a
look inside: `kind export kubeconfig --name NAME`). Prints one line per step with its seconds since
the start; exits non-zero at the first failure. tests/kind/ runs the same steps under pytest.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from tests.kind import checks
from tests.kind.cluster import KindCluster, cached_image, require_image, volumes

BUSYBOX = "docker.io/library/busybox:1.36"  # the name in the test bed's busybox archive


class Steps:
    """Prints a step with its seconds since the start."""
    def __init__(self, name: str, printer: Callable[[str], None] = print) -> None:
        self.name, self.printer, self.started = name, printer, time.monotonic()

    def __call__(self, message: str) -> None:
        self.printer(f"[kind-smoke {self.name} {time.monotonic() - self.started:6.1f}s] {message}")


def check_cluster(cluster: KindCluster, step: Callable[[str], None]) -> dict[str, str]:
    """The checks of a created cluster; node name → the IP of its busybox pod (bb-NODE)."""
    versions = checks.nodes_ready(cluster)
    step("all nodes Ready: " + ", ".join(f"{node} {version}" for node, version in sorted(versions.items())))
    step(f"kube-system and CNI pods ready ({checks.system_pods_ready(cluster)} pods)")
    checks.load_image_archive(cluster, cached_image("busybox-1.36"))
    step(f"kind load image-archive: {BUSYBOX} on every node")
    ips = checks.pod_per_node(cluster, BUSYBOX)
    step("a pod on each node Ready: " + ", ".join(f"bb-{node} {ip}" for node, ip in sorted(ips.items())))
    first, last = min(ips), max(ips)
    checks.logs_show_output(cluster, [f"bb-{node}" for node in ips])
    step("kubectl logs: each pod's output")
    checks.exec_reaches(cluster, f"bb-{first}", ips[last])
    step(f"kubectl exec: the pod on {first} reaches the pod on {last} ({ips[last]}) by ping and HTTP")
    checks.port_forward_reaches(cluster, f"bb-{last}")
    step(f"kubectl port-forward: the pod on {last} answers through it")
    return ips


def main(argv: list[str]) -> int:
    if not 1 <= len(argv) <= 3:
        print(__doc__, file=sys.stderr)
        return 2
    image, name = argv[0], argv[1] if len(argv) > 1 else "smoke"
    worker_image = argv[2] if len(argv) > 2 else image
    keep = bool(os.environ.get("KIND_SMOKE_KEEP"))
    step = Steps(name)
    with tempfile.TemporaryDirectory(prefix="pkl-kind-smoke-") as tmp:
        cluster = KindCluster(name, image, worker_image, Path(tmp), say=step)
        try:
            for each in {image, worker_image}:
                require_image(each)
            volumes_before = volumes()
            step(f"kind create cluster: control plane on {image}, worker on {worker_image}")
            cluster.create()
            check_cluster(cluster, step)
            if keep:
                step(f"kept (KIND_SMOKE_KEEP): kind export kubeconfig --name {name}")
                cluster.created = False
                return 0
            checks.delete_leaves_nothing(cluster, volumes_before)
            step("kind delete cluster: no container or volume of it left "
                 "(kind keeps its network 'kind' for the next cluster)")
        except AssertionError as failure:
            step(f"FAILED: {failure}")
            return 1
        finally:
            cluster.delete()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
