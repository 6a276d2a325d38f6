"""The static pod directory as the agent watches it (real inotify, real files): a manifest
written, changed, replaced or removed reaches the pod set at once, not at the next rescan; the
watch follows a single manifest file across its replacement and a directory removed and made
again; stopping leaves no descriptor open."""

from __future__ import annotations

import asyncio
import os
import pathlib

from pykubelet.api.pod import Pod
from pykubelet.sources.static_files import StaticPodSource
from tests.helpers import wait_for

NODE = "node1"
NEVER = 3600.0  # rescan period: only inotify can deliver the change within the test's deadline


def manifest(name: str, image: str = "busybox:1.36") -> str:
    return f"apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  containers:\n  - {{name: app, image: '{image}'}}\n"


def write_atomically(path: pathlib.Path, text: str) -> None:
    """As kubeadm writes a manifest: a temporary file renamed over the old one."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.rename(path)


class Watched:
    """A StaticPodSource running on the test's loop; `sets` is every pod set it published."""

    def __init__(self, path: pathlib.Path, rescan_seconds: float = NEVER):
        self.sets: list[list[Pod]] = []
        self.source = StaticPodSource(str(path), NODE, rescan_seconds, self.sets.append)
        self.task: asyncio.Task | None = None

    async def __aenter__(self) -> "Watched":
        self.task = asyncio.create_task(self.source.run())
        await asyncio.wait_for(self.source.ready.wait(), 10)
        return self

    async def __aexit__(self, *exc) -> None:
        assert self.task is not None
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)

    def images(self) -> dict[str, str]:
        return {p.name.rsplit("-", 1)[0]: p.containers[0].image for p in self.sets[-1]} if self.sets else {}

    async def until(self, images: dict[str, str], what: str) -> None:
        await wait_for(lambda: self.images() == images, 10, what, interval=0.005,
                       describe=lambda: f"the pods are {self.images()}")


async def test_a_manifest_written_changed_and_removed_reaches_the_pods_at_once(tmp_path):
    async with Watched(tmp_path) as watched:
        assert watched.images() == {}
        write_atomically(tmp_path / "web.yaml", manifest("web"))
        await watched.until({"web": "busybox:1.36"}, "the new manifest")
        (tmp_path / "web.yaml").write_text(manifest("web", "busybox:1.37"))  # written in place
        await watched.until({"web": "busybox:1.37"}, "the changed manifest")
        (tmp_path / "web.yaml").unlink()
        await watched.until({}, "the removed manifest")


async def test_a_burst_of_manifests_is_read_in_few_scans(tmp_path):
    async with Watched(tmp_path) as watched:
        before = len(watched.sets)
        for i in range(40):
            write_atomically(tmp_path / f"p{i}.yaml", manifest(f"p{i}"))
        await watched.until({f"p{i}": "busybox:1.36" for i in range(40)}, "all 40 manifests")
        # Changes that arrive while a scan runs are taken together by the next one.
        assert len(watched.sets) - before < 40


async def test_a_single_manifest_file_is_followed_across_its_replacements(tmp_path):
    path = tmp_path / "only.yaml"
    path.write_text(manifest("only"))
    (tmp_path / "other.yaml").write_text(manifest("other"))  # next to it, not watched
    async with Watched(path) as watched:
        assert watched.images() == {"only": "busybox:1.36"}
        for tag in ("1.37", "1.38"):
            write_atomically(path, manifest("only", f"busybox:{tag}"))
            await watched.until({"only": f"busybox:{tag}"}, f"the replaced file ({tag})")


async def test_a_directory_removed_and_made_again_is_watched_again(tmp_path):
    directory = tmp_path / "manifests"
    directory.mkdir()
    async with Watched(directory, rescan_seconds=0.2) as watched:
        write_atomically(directory / "web.yaml", manifest("web"))
        await watched.until({"web": "busybox:1.36"}, "the manifest")
        (directory / "web.yaml").unlink()
        directory.rmdir()
        await watched.until({}, "the directory gone")
        directory.mkdir()
        write_atomically(directory / "api.yaml", manifest("api"))
        await watched.until({"api": "busybox:1.36"}, "the directory made again")
        write_atomically(directory / "api.yaml", manifest("api", "busybox:1.37"))
        await watched.until({"api": "busybox:1.37"}, "a change in the new directory")


async def test_stopping_the_source_closes_its_inotify_descriptor(tmp_path):
    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))
    before = open_fds()
    async with Watched(tmp_path) as watched:
        write_atomically(tmp_path / "web.yaml", manifest("web"))
        await watched.until({"web": "busybox:1.36"}, "the manifest")
        assert open_fds() > before
    assert open_fds() == before
