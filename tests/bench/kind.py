"""kind with pykubelet nodes vs kind with the real kubelet, same run: how long `kind create
cluster` takes, and how fast pods start on the cluster it makes.

    python -m tests.bench.kind [--runs 2] [--pods 20]

Each run creates a two-node cluster (a control plane and a worker, both on one node image, with
tests/kind's cgroup v1 patch) on kindest/node:v1.36.3 (the real kubelet) or
pykubelet/kind-node:v1.36.3, alternating, and measures
- `kind create cluster` wall time (kind waits for nothing past the control plane's start: no --wait);
- pod start p50: after every node is Ready and kube-system's pods are ready, a Deployment of
  `--pods` pause pods (image loaded beforehand, pulled never) goes to all Ready; each pod's start
  is its Ready condition's lastTransitionTime minus its creationTimestamp, both from the API
  server (whole seconds: the API's timestamps have no fraction), and the run's value is their median.
Docker is started by tests/bed/docker.sh if it does not answer, and stopped afterwards then.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import tempfile
from pathlib import Path

from tests.bench.kubeadm import print_comparison
from tests.bench.startup import machine
from tests.kind import checks
from tests.kind.cluster import (KIND, KUBELET_IMAGE, PYKUBELET_IMAGE, KindCluster, cached_image, docker,
                                docker_daemon, ready, require_image, run)

IMAGES = {"kubelet": KUBELET_IMAGE, "pykubelet": PYKUBELET_IMAGE}
PAUSE = "registry.k8s.io/pause:3.10.2"  # the name in the test bed's pause archive
METRICS = ("kind create cluster (2 nodes)", "pod start p50")


def deployment(replicas: int) -> str:
    return f"""apiVersion: apps/v1
kind: Deployment
metadata: {{name: bench-pause}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: bench-pause}}}}
  template:
    metadata: {{labels: {{app: bench-pause}}}}
    spec:
      terminationGracePeriodSeconds: 0
      containers: [{{name: pause, image: "{PAUSE}", imagePullPolicy: Never}}]
"""


def timestamp(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def start_seconds(pod: dict) -> float:
    became_ready = next(c["lastTransitionTime"] for c in pod["status"]["conditions"] if c["type"] == "Ready")
    return (timestamp(became_ready) - timestamp(pod["metadata"]["creationTimestamp"])).total_seconds()


def pod_starts(cluster: KindCluster, count: int) -> list[float]:
    manifest = cluster.workdir / "deployment.yaml"
    manifest.write_text(deployment(count))
    cluster.kubectl("apply", "-f", str(manifest))

    def all_ready() -> list[dict] | None:
        pods = cluster.get("pods", "-l", "app=bench-pause")["items"]
        return pods if len(pods) == count and all(ready(p) for p in pods) else None
    return [start_seconds(pod) for pod in cluster.wait(all_ready, 300, f"{count} pause pods Ready")]


def one_run(kind: str, index: int, pods: int, workdir: Path) -> dict[str, float]:
    name = f"pkl-bench-{kind}"
    cluster = KindCluster(name, IMAGES[kind], IMAGES[kind], workdir / f"{name}-{index}", say=lambda _: None)
    cluster.workdir.mkdir()
    try:
        created = cluster.create()
        checks.nodes_ready(cluster)
        checks.system_pods_ready(cluster)
        checks.load_image_archive(cluster, cached_image("pause-3.10.2"))
        return {METRICS[0]: created, METRICS[1]: statistics.median(pod_starts(cluster, pods))}
    finally:
        cluster.delete()


def versions() -> str:
    kind_version = run(KIND, "version").stdout.strip()
    docker_version = docker("version", "--format", "{{.Server.Version}}").strip()
    return f"{kind_version}; docker {docker_version}; load average at the end {os.getloadavg()[0]:.1f}"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--pods", type=int, default=20)
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {"kubelet": [], "pykubelet": []}
    load_before = os.getloadavg()[0]
    with docker_daemon(), tempfile.TemporaryDirectory(prefix="pkl-bench-kind-") as tmp:
        for image in IMAGES.values():
            require_image(image)
        for i in range(args.runs):
            for kind in ("kubelet", "pykubelet") if i % 2 == 0 else ("pykubelet", "kubelet"):
                result = one_run(kind, i, args.pods, Path(tmp))
                print(f"{kind} run {i + 1}: " + ", ".join(f"{k} {v:.1f}s" for k, v in result.items()), flush=True)
                results[kind].append(result)
        summary = versions()
    print(f"\n{machine()}\n{summary} (at the start {load_before:.1f})\n"
          f"{args.runs} runs each, alternating; {args.pods} pods; seconds\n")
    print_comparison(results, digits=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
