"""Image garbage collection against the real containerd: with the high threshold below the image
filesystem's real usage, the agent removes an unused image, and keeps the image of a running pod,
the sandbox (pause) image and the images of containers that are not running.

This containerd's other images (the test bed's add-ons) cannot be pulled again on an offline
machine: before the agent may collect, each is held by a created, never started container, and the
test checks every one of them is still there afterwards.
"""

from __future__ import annotations

import asyncio
import pathlib
import secrets

import pytest

from pykubelet.cri.client import CRIClient
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.runtime import labels
from pykubelet.runtime.image_gc import filesystem_size
from pykubelet.runtime.image_gc_policy import sandbox_image, usage_percent
from tests.bed import images as bed_images
from tests.helpers import wait_for
from tests.runtime.conftest import BUSYBOX, ENDPOINT, NODE, main_status, phase, pod_manifest, write_manifest

GUARD = f"image-gc-guard-{NODE}"  # a test pod's name: the cri fixture removes it afterwards


def victim_image(directory: pathlib.Path) -> tuple[str, pathlib.Path]:
    """A tiny image of its own (a config label makes its ID unique), packed for `ctr images import`."""
    name = f"docker.io/pykubelet-test/image-gc-victim:{secrets.token_hex(4)}"
    spec = bed_images.ImageSpec(
        short="image-gc-victim", name=name, inputs=lambda: b"",
        layer=lambda _: [bed_images.Entry("victim.txt", "file", 0o644, b"collect me\n")],
        config={"Env": [bed_images.PATH_ENV], "Cmd": ["/victim.txt"], "Labels": {"test.pykubelet.io/run": name}})
    data, _ = bed_images.build_layout_tar(spec, directory)
    path = directory / "victim.tar"
    path.write_bytes(data)
    return name, path


async def guard_images(cri: CRIClient, image_ids: list[str], log_dir: pathlib.Path) -> None:
    """Hold each image with a created (never started) container in a host-network sandbox."""
    metadata = api.PodSandboxMetadata(name=GUARD, namespace="default", uid=secrets.token_hex(8))
    config = api.PodSandboxConfig(metadata=metadata, log_directory=str(log_dir), linux=api.LinuxPodSandboxConfig(
        security_context=api.LinuxSandboxSecurityContext(
            namespace_options=api.NamespaceOption(network=api.NODE))))
    sandbox = await cri.run_pod_sandbox(config)
    for n, image_id in enumerate(image_ids):
        container = api.ContainerConfig(
            metadata=api.ContainerMetadata(name=f"hold-{n}"), image=api.ImageSpec(image=image_id),
            command=["/never-started"], log_path=f"hold-{n}.log",
            labels={labels.POD_NAME: GUARD, labels.POD_NAMESPACE: "default"})
        await cri.create_container(sandbox, container, config)


async def image_ids(cri: CRIClient) -> set[str]:
    return {image.id for image in await cri.list_images()}


@pytest.fixture(autouse=True)
def ctr_at_the_test_runtime(monkeypatch):
    """`ctr` (the bed's image imports) talks to the containerd the tests use (PYKUBELET_TEST_ENDPOINT)."""
    monkeypatch.setenv("CONTAINERD_ADDRESS", ENDPOINT.removeprefix("unix://"))


@pytest.fixture
async def restore_bed_images(cri):
    """Should collection ever take the pause or busybox image, the test bed gets it back."""
    yield
    tags = {tag for image in await cri.list_images() for tag in image.repo_tags}
    for spec in bed_images.IMAGES.values():
        if spec.name not in tags:
            await asyncio.to_thread(bed_images.ensure, spec, pathlib.Path(bed_images.DEFAULT_CACHE),
                                    bed_images.Ctr(bed_images.default_snapshotter()))


@pytest.fixture
async def victim(cri, tmp_path):
    """The unused image, imported; removed afterwards if the agent did not."""
    name, tar = victim_image(tmp_path)
    ctr = bed_images.Ctr(bed_images.default_snapshotter())
    await asyncio.to_thread(ctr.import_tar, tar)
    image = await cri.image_status(name)
    assert image is not None, f"{name} was imported but containerd does not list it"
    yield image.id
    await cri.remove_image(image.id)


async def test_an_unused_image_is_removed_and_used_pinned_and_sandbox_images_stay(restore_bed_images, agent, cri,
                                                                                 manifests, tmp_path, victim):
    # containerd 1.x names its sandbox image in its Status; 2.x does not, and pins the bed's pause image.
    pause = await cri.image_status(sandbox_image(dict((await cri.status(verbose=True)).info))
                                   or bed_images.IMAGES["pause"].name)
    busybox = await cri.image_status(BUSYBOX)
    assert pause is not None and busybox is not None, "run `make setup`: the pause and busybox images are missing"

    # A running pod uses busybox: started by this agent, adopted by the next one.
    write_manifest(manifests, "user", pod_manifest("user", ["sleep", "3600"]))
    name = f"user-{NODE}"
    await agent.wait_pod(name, lambda p: phase(p) == "Running", 60, "phase Running")
    before = await image_ids(cri)
    others = sorted(before - {victim, pause.id, busybox.id})
    await guard_images(cri, others, tmp_path)

    # Over the high threshold whatever the disk's usage is today; every image is old enough at once.
    mountpoint = (await cri.image_fs_info()).image_filesystems[0].fs_id.mountpoint
    used = usage_percent(*await asyncio.to_thread(filesystem_size, mountpoint))
    high = max(used - 5, 1)
    agent.stop()
    agent.start(f"--image-gc-high-threshold={high}", f"--image-gc-low-threshold={high - 1}",
                "--minimum-image-ttl-duration=0s")

    async def victim_gone() -> bool:
        return victim not in await image_ids(cri)
    await wait_for(victim_gone, 60, "the unused image to be removed", describe=agent.describe)
    assert await image_ids(cri) == before - {victim}, "image garbage collection removed more than the unused image"
    assert "Disk usage on image filesystem is over the high threshold" in agent.log()
    pod = await agent.wait_pod(name, lambda p: phase(p) == "Running", 20, "still Running")
    assert main_status(pod)["restartCount"] == 0
