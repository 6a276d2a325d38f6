"""A manifest added to the static pod directory starts its pod and leaves the others alone: the
source hands the dispatcher the same pod for a file whose bytes did not change, so the workers of
the pods already running are not woken to sync again (with many static pods, each new manifest
would otherwise cost a sync of every one before its own pod starts)."""

from __future__ import annotations

import pathlib

import pytest

from pykubelet.sources.static_files import StaticPodSource
from tests.unit.core.harness import NODE, until

pytestmark = pytest.mark.looptime


def manifest(name: str) -> str:
    return f"apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  containers:\n" \
           "  - {name: app, image: 'busybox:1.36'}\n"


async def test_a_new_manifest_does_not_sync_the_pods_already_running(node, tmp_path: pathlib.Path):
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    source = StaticPodSource(str(manifests), NODE, 20.0, on_pods=node.dispatcher.set_pods)

    def publish() -> dict[str, str]:
        pods, _ = source.scan()
        node.dispatcher.set_pods(pods)
        return {p.name: p.uid for p in pods}

    def running(uid: str) -> bool:
        return node.status(uid).get("phase") == "Running"

    (manifests / "first.yaml").write_text(manifest("first"))
    first = publish()[f"first-{NODE}"]
    await until(lambda: running(first), what="the first pod Running")
    syncs = node.dispatcher.records.get(first).syncs

    (manifests / "second.yaml").write_text(manifest("second"))
    second = publish()[f"second-{NODE}"]
    await until(lambda: running(second), what="the second pod Running")
    assert node.dispatcher.records.get(first).syncs == syncs

    (manifests / "first.yaml").write_text(manifest("first") + "  restartPolicy: Never\n")  # changed: a new pod
    assert f"first-{NODE}" in publish() and first not in {p.uid for p in source.scan()[0]}
