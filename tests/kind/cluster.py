"""A kind cluster driven the way a user drives one: the `kind` and `kubectl` commands `make kind`
builds, Debian's `docker` (the daemon tests/bed/docker.sh starts), node images from
tests/bed/build-kind-node.sh.

Every cluster gets the one kubeadm patch this cgroup v1 machine needs: `failCgroupV1: false` (the
v1.36 kubelet, real or pykubelet, refuses cgroup v1 by default).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Iterator
from typing import Any, Callable

from tests.helpers import run_to_completion, wait_for

REPO = Path(__file__).resolve().parents[2]
BED = REPO / "tests" / "bed"
CACHE = Path(os.environ.get("PYKUBELET_CACHE", "/var/cache/pykubelet"))
K8S_VERSION = os.environ.get("K8S_VERSION", "v1.36.3")
KIND = CACHE / "kind" / "bin" / "kind"
KUBECTL = CACHE / "k8s" / K8S_VERSION / "bin" / "kubectl"
DOCKER = "/usr/bin/docker"  # Debian's, the client of the daemon docker.sh starts
PYKUBELET_IMAGE = f"pykubelet/kind-node:{K8S_VERSION}"
KUBELET_IMAGE = f"kindest/node:{K8S_VERSION}"
# kind runs `docker` from PATH: Debian's first (another one may come earlier on this machine)
ENV = {**os.environ, "PATH": "/usr/bin:" + os.environ.get("PATH", "")}
CLUSTER_LABEL = "io.x-k8s.kind.cluster"


def cached_image(prefix: str) -> Path:
    """The test bed's OCI archive of an image (tests/bed/images.py writes them)."""
    found = sorted((CACHE / "images").glob(f"{prefix}-*.tar"))
    assert found, f"no {prefix}-*.tar in {CACHE / 'images'} (tests/bed/images.py builds it)"
    return found[0]


def run(*args: str | Path, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, env=ENV, timeout=timeout)
    if check:
        assert done.returncode == 0, (f"`{' '.join(str(a) for a in args)}` exited {done.returncode}:\n"
                                      f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return done


def docker(*args: str | Path, timeout: float = 120, check: bool = True) -> str:
    return run(DOCKER, *args, timeout=timeout, check=check).stdout


def docker_image_exists(image: str) -> bool:
    return run(DOCKER, "image", "inspect", image, check=False).returncode == 0


def require_image(image: str) -> None:
    assert docker_image_exists(image), f"node image {image} is not in docker: `make kind` builds it"


def load_oci_archive(archive: Path, tag: str) -> None:
    """Put an image from an OCI archive into docker as `tag`. Docker 20.10's `docker load` reads
    only its own archive format, which is the OCI layout plus a manifest.json naming the config
    and layers, so one is added to a copy of the archive."""
    with tarfile.open(archive) as oci:
        index = json.load(oci.extractfile("index.json"))  # type: ignore[arg-type]
        manifest_digest = index["manifests"][0]["digest"].replace(":", "/")
        manifest = json.load(oci.extractfile(f"blobs/{manifest_digest}"))  # type: ignore[arg-type]
        blob = lambda descriptor: "blobs/" + descriptor["digest"].replace(":", "/")  # noqa: E731
        save_manifest = [{"Config": blob(manifest["config"]), "RepoTags": [tag],
                          "Layers": [blob(layer) for layer in manifest["layers"]]}]
        with tempfile.TemporaryDirectory(prefix="pkl-kind-image-") as tmp:
            converted = Path(tmp) / "image.tar"
            with tarfile.open(converted, "w") as out:
                for member in oci.getmembers():
                    out.addfile(member, oci.extractfile(member) if member.isfile() else None)
                data = json.dumps(save_manifest).encode()
                info = tarfile.TarInfo("manifest.json")
                info.size = len(data)
                out.addfile(info, io.BytesIO(data))
            docker("load", "-i", converted)


def cluster_config(image: str, worker_image: str) -> str:
    """kind's cluster config: a control plane on `image`, and a worker on `worker_image` unless it
    is empty (kind then removes the control plane's taint, so pods run on it)."""
    worker = f"- role: worker\n  image: {worker_image}\n" if worker_image else ""
    return f"""kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
kubeadmConfigPatches:
- |
  kind: KubeletConfiguration
  failCgroupV1: false
nodes:
- role: control-plane
  image: {image}
{worker}"""


@dataclass
class KindCluster:
    """One kind cluster: a control plane on `image` and a worker on `worker_image` (none if empty)."""
    name: str
    image: str
    worker_image: str
    workdir: Path
    say: Callable[[str], None] = print
    created: bool = field(default=False, init=False)

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    def create(self) -> float:
        """`kind create cluster`; its wall time in seconds. Its output goes to `say` line by line."""
        config = self.workdir / "cluster.yaml"
        config.write_text(cluster_config(self.image, self.worker_image))
        args = [str(KIND), "create", "cluster", "--name", self.name, "--config", str(config),
                "--kubeconfig", str(self.kubeconfig)]
        self.created = True  # a half-made cluster is deleted too
        started = time.monotonic()
        with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV) as kind:
            assert kind.stdout is not None
            output = []
            for line in kind.stdout:
                output.append(line)
                self.say(f"  {line.rstrip()}")
            code = kind.wait()
        seconds = time.monotonic() - started
        assert code == 0, f"kind create cluster {self.name} exited {code}:\n{''.join(output[-30:])}"
        return seconds

    def delete(self) -> None:
        if self.created:
            run(KIND, "delete", "cluster", "--name", self.name, timeout=180)
            self.created = False

    def containers(self) -> list[str]:
        return docker("ps", "-a", "--filter", f"label={CLUSTER_LABEL}={self.name}", "-q").split()

    def kubectl(self, *args: str, timeout: float = 60, check: bool = True) -> str:
        return run(KUBECTL, "--kubeconfig", self.kubeconfig, *args, timeout=timeout, check=check).stdout

    def get(self, *args: str) -> dict[str, Any]:
        return json.loads(self.kubectl("get", *args, "-o", "json"))

    def describe(self) -> str:
        if not self.kubeconfig.exists():
            return "(no kubeconfig yet)"
        return self.kubectl("get", "nodes,pods", "-A", "-o", "wide", check=False)

    def wait(self, condition: Callable[[], Any], timeout: float, what: str) -> Any:
        return run_to_completion(wait_for(condition, timeout, f"{what} (cluster {self.name})", interval=1,
                                          describe=self.describe))


def ready(item: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in item["status"].get("conditions", []))


def volumes() -> set[str]:
    return set(docker("volume", "ls", "-q").split())


def runs_pykubelet(node: str) -> bool:
    """Whether kind node container `node`'s /usr/bin/kubelet is pykubelet's (a Python entry point
    script) rather than the real kubelet (an ELF binary)."""
    return docker("exec", node, "head", "-c", "2", "/usr/bin/kubelet") == "#!"


DOCKER_SH = ["bash", str(BED / "docker.sh")]


@contextlib.contextmanager
def docker_daemon(say: Callable[[str], None] = print) -> Iterator[None]:
    """Docker answering inside the block: started by tests/bed/docker.sh if it did not answer,
    and then stopped at the end (left running if it already was)."""
    started = subprocess.run([*DOCKER_SH, "status"], capture_output=True).returncode != 0
    if started:
        say("starting docker (tests/bed/docker.sh start)")
        subprocess.run([*DOCKER_SH, "start"], check=True)
    try:
        yield
    finally:
        if started:
            subprocess.run([*DOCKER_SH, "stop"], check=True)
