"""The Summary API's pods and containers are what the runtime runs, whatever the agent knows of the
pod yet: a restarted agent's eviction manager asks before it has rebuilt its pods' statuses, and
the kubelet's eviction message names the containers using more than they requested."""

from __future__ import annotations

import asyncio

from pykubelet.config import Settings
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.runtime import labels
from pykubelet.server.host import Host
from pykubelet.server.stats import SummaryProvider

UID = "uid-summary-1"


def container(id: str, name: str, state: int, created_s: int) -> api.Container:
    return api.Container(id=id, state=state, created_at=created_s * 10**9,
                         labels={labels.POD_UID: UID, labels.CONTAINER_NAME: name})


def stats(id: str, working_set: int) -> api.ContainerStats:
    out = api.ContainerStats(attributes=api.ContainerAttributes(id=id))
    out.memory.working_set_bytes.value = working_set
    return out


class FakeRuntime:
    """The CRI calls the summary makes: one ready sandbox with a running and an exited container."""

    async def list_container_stats(self) -> list[api.ContainerStats]:
        return [stats("c-run", 5 * 2**20), stats("c-old", 9 * 2**20)]

    async def list_containers(self) -> list[api.Container]:
        return [container("c-run", "main", api.CONTAINER_RUNNING, 200),
                container("c-old", "main", api.CONTAINER_EXITED, 100)]

    async def list_pod_sandbox(self) -> list[api.PodSandbox]:
        metadata = api.PodSandboxMetadata(name="p", namespace="ns", uid=UID)
        return [api.PodSandbox(id="sb-old", state=api.SANDBOX_NOTREADY, metadata=metadata, created_at=10**9),
                api.PodSandbox(id="sb", state=api.SANDBOX_READY, metadata=metadata, created_at=150 * 10**9)]

    async def pod_sandbox_status(self, sandbox_id: str, verbose: bool = False) -> api.PodSandboxStatusResponse:
        return api.PodSandboxStatusResponse(info={"info": "{}"})


def test_a_pod_the_restarted_agent_has_no_status_for_yet_reports_its_running_container(tmp_path):
    settings = Settings()
    settings.root_dir = str(tmp_path)
    # What a just-restarted agent has: no pod (and no status) at all yet.
    host = Host(settings=settings, cri=FakeRuntime(), node_ips=[], pods=lambda: [])  # type: ignore[arg-type]

    summary = asyncio.run(SummaryProvider(host).summary(only_cpu_and_memory=True))

    (reported,) = summary["pods"]
    assert reported["podRef"] == {"name": "p", "namespace": "ns", "uid": UID}
    assert reported["startTime"] == "1970-01-01T00:02:30Z"  # the ready sandbox's creation
    assert [(c["name"], c["memory"]["workingSetBytes"], c["startTime"]) for c in reported["containers"]] == [
        ("main", 5 * 2**20, "1970-01-01T00:03:20Z")]  # the running one only, started when it was created


class FullRuntime(FakeRuntime):
    async def image_fs_info(self) -> api.ImageFsInfoResponse:
        return api.ImageFsInfoResponse()


def test_csi_volumes_are_reported_as_their_driver_measured_them_never_walked(tmp_path):
    settings = Settings()
    settings.root_dir = str(tmp_path)
    volumes = tmp_path / "pods" / UID / "volumes"
    (volumes / "kubernetes.io~empty-dir" / "cache").mkdir(parents=True)
    (volumes / "kubernetes.io~empty-dir" / "cache" / "f").write_bytes(b"x" * 10)
    (volumes / "kubernetes.io~csi" / "pvc-1" / "mount").mkdir(parents=True)
    (volumes / "kubernetes.io~csi" / "pvc-1" / "mount" / "big").write_bytes(b"x" * 4096)
    measured = {"name": "data", "usedBytes": 7, "pvcRef": {"name": "data-p", "namespace": "ns"}}
    asked: list[list[str]] = []

    async def volume_stats(uids: list[str]) -> dict[str, list[dict]]:
        asked.append(uids)
        return {UID: [measured]}
    host = Host(settings=settings, cri=FullRuntime(), node_ips=[], pods=lambda: [],  # type: ignore[arg-type]
                volume_stats=volume_stats)

    (reported,) = asyncio.run(SummaryProvider(host).summary())["pods"]

    assert asked == [[UID]]
    # No entry of the CSI directory itself: its driver's figures stand for it.
    assert [v["name"] for v in reported["volume"]] == ["cache", "data"]
    assert reported["volume"][1] == measured
