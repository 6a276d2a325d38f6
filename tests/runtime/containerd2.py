"""containerd 2.x for the tests that sample a tier on it: a containerd of the test's own
(tests/bed/containerd-node.sh --containerd2), from the binaries `make containerd2` builds, using
the machine's CNI config dir as the main containerd does."""

from __future__ import annotations

import contextlib
import pathlib
import subprocess
from collections.abc import AsyncIterator, Iterator

from pykubelet.cri.client import CRIClient
from tests.runtime.conftest import remove_test_pods

BED = pathlib.Path(__file__).resolve().parents[2] / "tests" / "bed"
NODE_SCRIPT = ["bash", str(BED / "containerd-node.sh")]


def built() -> bool:
    bin_dir = subprocess.run(["bash", str(BED / "build-containerd2.sh"), "--bin-dir"], capture_output=True,
                             text=True, check=True).stdout.strip()
    return (pathlib.Path(bin_dir) / ".stamp").is_file()


@contextlib.contextmanager
def containerd2(name: str) -> Iterator[str]:
    """A containerd 2.x named `name`, up until the block ends; yields its CRI endpoint."""
    if not built():
        raise AssertionError("containerd 2.x is not built: run `make containerd2` (tests/bed/build-containerd2.sh)")
    subprocess.run([*NODE_SCRIPT, "down", name], capture_output=True, timeout=180)  # a killed run's leftover
    try:
        up = subprocess.run([*NODE_SCRIPT, "up", name, "--containerd2", "--cni-conf-dir", "/etc/cni/net.d"],
                            capture_output=True, text=True, timeout=300)
        assert up.returncode == 0, f"containerd 2.x did not start: {up.stderr[-3000:]}"
        yield up.stdout.strip().splitlines()[-1]
    finally:
        subprocess.run([*NODE_SCRIPT, "down", name], capture_output=True, timeout=180)


@contextlib.asynccontextmanager
async def clean_client(endpoint: str) -> AsyncIterator[CRIClient]:
    """A CRI client of that containerd, with no test pod in it before or after."""
    client = CRIClient(endpoint)
    await remove_test_pods(client)
    try:
        yield client
        await remove_test_pods(client)
    finally:
        await client.close()
