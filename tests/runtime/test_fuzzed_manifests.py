"""A running agent fed odd manifests in bulk keeps its good pods: not one restart, not one
container replaced, and it stays up. Also the manifest directory's awkward moments: symlink
loops, a 10 MB file, a file written slowly, the directory removed and recreated."""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil

import yaml

from pykubelet.sources.static_files import ManifestError, read_manifest
from tests.helpers import wait_for
from tests.mutations import mutate
from tests.runtime.conftest import NODE, main_status, phase, pod_manifest, write_manifest

# CI feeds a sample; `make soak` sets PYKUBELET_FUZZ_MANIFESTS=1000.
MANIFESTS = int(os.environ.get("PYKUBELET_FUZZ_MANIFESTS", "150"))
BATCH = 50

MUTANT_BASE = pod_manifest("mutant", "true", restart_policy="Never", imagePullPolicy="Never",
                           env=[{"name": "A", "value": "1"}],
                           resources={"limits": {"memory": "32Mi"}},
                           readinessProbe={"exec": {"command": ["true"]}, "periodSeconds": 1},
                           volumeMounts=[{"name": "scratch", "mountPath": "/scratch"}])
MUTANT_BASE["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]


def running(pod) -> bool:
    return phase(pod) == "Running" and "running" in main_status(pod)["state"]


async def start_good_pods(agent, manifests) -> dict[str, str]:
    """Two good pods; their container IDs, to check later that nothing replaced them."""
    ids = {}
    for name in ("good-a", "good-b"):
        write_manifest(manifests, name, pod_manifest(name, "sleep 3600"))
    for name in ("good-a", "good-b"):
        pod = await agent.wait_pod(f"{name}-{NODE}", running, 30, "Running")
        ids[name] = main_status(pod)["containerID"]
    return ids


async def assert_good_pods_untouched(agent, ids: dict[str, str]) -> None:
    assert agent.proc.poll() is None, f"the agent died:\n{agent.log()[-3000:]}"
    pods = agent.pods()
    for name, container_id in ids.items():
        status = main_status(pods[f"{name}-{NODE}"])
        assert running(pods[f"{name}-{NODE}"]), status
        assert (status["containerID"], status["restartCount"]) == (container_id, 0), status


async def test_mutated_manifests_beside_good_pods_leave_them_untouched(agent, cri, manifests):
    ids = await start_good_pods(agent, manifests)
    rng = random.Random(20261203)
    for first in range(0, MANIFESTS, BATCH):
        valid = []
        for i in range(first, min(first + BATCH, MANIFESTS)):
            doc = mutate(MUTANT_BASE, rng, changes=rng.choice((1, 2, 3)))
            if isinstance(doc.get("metadata"), dict):
                doc["metadata"]["name"] = f"mutant-{i}"
            path = write_manifest(manifests, f"mutant-{i}", json.dumps(doc, default=str))
            try:
                valid.append(read_manifest(str(path), NODE)[0].name)
            except ManifestError:
                pass
        # The agent has taken the batch in once every valid mutant is one of its pods.
        await wait_for(lambda: set(valid) <= set(agent.pods() or {}), 60,
                       f"the agent to take in the {len(valid)} valid mutants of a batch", describe=agent.describe)
        for path in manifests.glob("mutant-*.yaml"):
            path.unlink()

        async def mutants_gone() -> bool:
            # No mutant's worker is left (one may still be creating a sandbox CRI does not list yet:
            # stopping the agent then cancels that call, and containerd 1.6 can lose the shim it
            # was starting), and no mutant's sandbox either.
            if agent.working_pods() != len(ids):
                return False
            return not [s for s in await cri.list_pod_sandbox() if s.metadata.name.startswith("mutant-")]
        await wait_for(mutants_gone, 120, "the agent to remove the batch's pods", interval=0.5,
                       describe=agent.describe)
        await assert_good_pods_untouched(agent, ids)


async def test_awkward_files_in_the_manifest_directory_leave_good_pods_untouched(agent, cri, manifests):
    ids = await start_good_pods(agent, manifests)
    os.symlink("loop.yaml", manifests / "loop.yaml")  # a symlink to itself
    os.symlink("b.yaml", manifests / "a.yaml")
    os.symlink("a.yaml", manifests / "b.yaml")
    big = pod_manifest("big", "sleep 3600")
    big["metadata"]["annotations"] = {"filler": "x" * (10 * 2**20)}
    write_manifest(manifests, "big", big)
    slow = yaml.safe_dump(pod_manifest("slow", "sleep 3600")).encode()
    with open(manifests / "slow.yaml", "wb") as f:  # written in two goes, a second apart
        f.write(slow[: len(slow) // 2])
        f.flush()
        await asyncio.sleep(1)
        f.write(slow[len(slow) // 2:])

    await agent.wait_pod(f"slow-{NODE}", running, 30, "the slowly written pod Running once whole")
    await wait_for(lambda: "loop.yaml" in agent.log() and "big.yaml" in agent.log(), 20,
                   "errors naming the looping and the oversized manifests", describe=agent.describe)
    assert f"big-{NODE}" not in agent.pods()
    await assert_good_pods_untouched(agent, ids)


async def test_the_manifest_directory_removed_and_recreated(agent, cri, manifests):
    await start_good_pods(agent, manifests)
    kept = manifests.parent / "kept"
    shutil.move(manifests, kept)

    async def good_pods_gone() -> bool:
        return not [s for s in await cri.list_pod_sandbox() if s.metadata.name.startswith("good-")]
    await wait_for(good_pods_gone, 60, "the pods of a removed directory to go (the kubelet's rule)",
                   describe=agent.describe)
    shutil.move(kept, manifests)
    for name in ("good-a", "good-b"):
        await agent.wait_pod(f"{name}-{NODE}", running, 60, "Running again once the directory is back")
    assert agent.proc.poll() is None
