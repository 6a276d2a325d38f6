"""`make kind-conformance`: Kubernetes' own [NodeConformance] e2e specs on a kind node.

    python -m tests.conformance.kind [--node pykubelet|kubelet] [--procs 3]

The same selection as `make conformance` (suite.py's focus and skip; CONFORMANCE_FOCUS and
CONFORMANCE_SKIP override them), run by the same e2e.test v1.36.3, on a one-node kind cluster:
`kind create cluster` of pykubelet/kind-node:v1.36.3 (or with --node kubelet kindest/node:v1.36.3,
the baseline), whose only node is its control plane. kind takes the control plane's taint off a
cluster of one node, so that node runs the control plane's static pods, kube-system's and the
CNI's pods, and every spec's pods, all under the node image's kubelet. The e2e test images
(tests/bed/images_e2e.py's, the bare run's) go in with `kind load image-archive`.

Results go to build/conformance/kind-<node>/: junit.xml, ginkgo.log, the node's kubelet log
(kubelet.log) and summary.txt, which also lists every spec whose outcome differs from the same
node agent's last bare run (`make conformance`, build/conformance/<node>/) when there is one.
The cluster is deleted at the end, and a cluster a killed run left is deleted before the next.
Docker is started by tests/bed/docker.sh if it was not running, and then stopped again.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
import tempfile
import time

from tests.conformance import suite
from tests.conformance.cluster import stop_on_sigterm
from tests.conformance.bed import BED, exclusive, say
from tests.kind import checks
from tests.kind.cluster import (DOCKER, KIND, KUBELET_IMAGE, PYKUBELET_IMAGE, KindCluster, docker_daemon,
                                require_image, run, runs_pykubelet)

RESULTS = BED.parents[1] / "build" / "conformance"
CLUSTER = "pkl-conformance"
NODE = f"{CLUSTER}-control-plane"
IMAGES = {"pykubelet": PYKUBELET_IMAGE, "kubelet": KUBELET_IMAGE}
LOCK = pathlib.Path("/tmp/pkl-kind-conformance.lock")  # one cluster of this name at a time


def e2e_image_archives() -> list[pathlib.Path]:
    """The test images' OCI archives, as the bare run has them (images_e2e.py builds what is
    missing and names each archive)."""
    out = subprocess.run([sys.executable, str(BED / "images_e2e.py"), "--no-import"], stdout=subprocess.PIPE,
                         text=True, check=True, timeout=3600).stdout
    archives = [pathlib.Path(line.split(" built ", 1)[1]) for line in out.splitlines() if " built " in line]
    if not archives:
        raise RuntimeError(f"images_e2e.py named no image archive:\n{out}")
    return archives


def load_images(cluster: KindCluster, archives: list[pathlib.Path]) -> None:
    for archive in archives:
        started = time.monotonic()
        checks.load_image_archive(cluster, archive)
        say(f"  kind load image-archive {archive.name} ({time.monotonic() - started:.0f}s)")


def save_kubelet_log(results: pathlib.Path) -> None:
    """The node's kubelet unit's journal, for a look at a failure after the cluster is gone."""
    with open(results / "kubelet.log", "w") as log:
        subprocess.run([DOCKER, "exec", NODE, "journalctl", "-u", "kubelet", "--no-pager", "-o", "short-precise"],
                       stdout=log, stderr=subprocess.STDOUT, timeout=300, check=False)


def conformance(node: str, focus: str, skip: str, procs: int, results: pathlib.Path,
                timeout: str = suite.SUITE_TIMEOUT) -> list[suite.Result]:
    """The whole run on a new one-node kind cluster; the results (also in results/junit.xml)."""
    image = IMAGES[node]
    results.mkdir(parents=True, exist_ok=True)
    names = suite.selected(results / "dry-run", focus, skip)
    if not names:
        raise RuntimeError(f"the selection holds no spec: focus {focus!r}, skip {skip!r}")
    archives = e2e_image_archives()
    with exclusive(LOCK, "kind conformance run"), docker_daemon(say), \
            tempfile.TemporaryDirectory(prefix="pkl-kind-conformance-") as tmp:
        require_image(image)
        run(KIND, "delete", "cluster", "--name", CLUSTER, timeout=180)  # what a killed run left
        cluster = KindCluster(CLUSTER, image, "", pathlib.Path(tmp), say=say)
        try:
            say(f"kind create cluster {CLUSTER}: one node on {image}")
            say(f"cluster created in {cluster.create():.0f}s")
            if runs_pykubelet(NODE) != (node == "pykubelet"):
                raise RuntimeError(f"node {NODE} of {image} does not run {node} as /usr/bin/kubelet")
            say("node Ready: " + ", ".join(f"{n} {v}" for n, v in checks.nodes_ready(cluster, count=1).items()))
            say(f"kube-system's and the CNI's pods ready ({checks.system_pods_ready(cluster)} pods)")
            load_images(cluster, archives)
            return suite.run(results, focus, skip, procs, len(names), timeout,
                             target=suite.Target(kubeconfig=cluster.kubeconfig))
        finally:
            save_kubelet_log(results)
            say(f"kind delete cluster {CLUSTER}")
            cluster.delete()


def main(argv: list[str] | None = None) -> int:
    parser = suite.arguments(__doc__.split("\n\n")[0], tuple(sorted(IMAGES)), "build/conformance/kind-<node>")
    args = parser.parse_args(argv)
    stop_on_sigterm()
    results_dir = args.results or RESULTS / f"kind-{args.node}"
    start = time.monotonic()
    results = conformance(args.node, args.focus, args.skip, args.procs, results_dir)
    return suite.report(results, RESULTS, f"kind-{args.node}", results_dir,
                        f"[NodeConformance] on a kind node of {IMAGES[args.node]}", start, reference=args.node)


if __name__ == "__main__":
    sys.exit(main())
