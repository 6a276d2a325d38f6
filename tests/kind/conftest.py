"""The kind tier: kind clusters whose nodes run pykubelet (tests/kind/smoke.py's checks under
pytest). Needs `make kind` (kind, kubectl and both node images); `make kind-test` runs it.

Docker is started by tests/bed/docker.sh for the session and stopped afterwards only if this
session started it. Every cluster is deleted however its test ends, and the session fails if a
container of a kind cluster or a volume is left that was not there before.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Callable

import pytest

from tests import progress
from tests.kind.cluster import CLUSTER_LABEL, KindCluster, docker, docker_daemon, require_image, volumes


@pytest.fixture(scope="session", autouse=True)
def docker_running() -> Iterator[None]:
    with docker_daemon(lambda line: progress.say("kind", line)):
        yield


@pytest.fixture(scope="session", autouse=True)
def docker_left_as_found(docker_running: None) -> Iterator[None]:
    clusters_before = set(docker("ps", "-a", "--filter", f"label={CLUSTER_LABEL}", "-q").split())
    volumes_before = volumes()
    yield
    clusters_left = set(docker("ps", "-a", "--filter", f"label={CLUSTER_LABEL}", "-q").split()) - clusters_before
    volumes_left = volumes() - volumes_before
    assert not clusters_left and not volumes_left, (
        f"the kind tier left kind node containers {sorted(clusters_left)} and volumes {sorted(volumes_left)}")


@pytest.fixture
def kind_cluster() -> Iterator[Callable[[str, str, str], KindCluster]]:
    """Makes a KindCluster (not yet created) with a work directory of its own; each one made is
    deleted when the test ends."""
    made: list[KindCluster] = []
    with tempfile.TemporaryDirectory(prefix="pkl-kind-") as tmp:
        def make(name: str, image: str, worker_image: str) -> KindCluster:
            for each in {image, worker_image}:
                require_image(each)
            workdir = Path(tmp) / name
            workdir.mkdir()
            cluster = KindCluster(name, image, worker_image, workdir, say=lambda line: progress.say(name, line))
            made.append(cluster)
            return cluster
        try:
            yield make
        finally:
            for cluster in made:
                cluster.delete()
