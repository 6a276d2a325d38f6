"""The container log manager over real files and a fake runtime that reopens logs as containerd
does: which containers are rotated, what is left after rounds, and what a failed reopen undoes."""

from __future__ import annotations

import asyncio
import gzip
import os
import pathlib
from datetime import datetime, timedelta, timezone

import grpc
import pytest

from pykubelet.config.settings import ContainerLogSettings
from pykubelet.cri import errors
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.runtime.log_rotation import ContainerLogManager


class LogRuntime:
    """Containers with log files; ReopenContainerLog makes a new empty file at the log path."""

    def __init__(self) -> None:
        self.containers: dict[str, tuple[int, str]] = {}  # id -> (state, log path)
        self.reopened: list[str] = []
        self.reopen_fails = False
        self.in_status = 0
        self.most_in_status = 0

    async def list_containers(self, label_selector=None) -> list[api.Container]:
        return [api.Container(id=cid, state=state) for cid, (state, _) in self.containers.items()]

    async def container_status(self, container_id: str, verbose: bool = False) -> api.ContainerStatusResponse:
        self.in_status += 1
        self.most_in_status = max(self.most_in_status, self.in_status)
        await asyncio.sleep(0.01)
        self.in_status -= 1
        state, path = self.containers[container_id]
        return api.ContainerStatusResponse(status=api.ContainerStatus(id=container_id, state=state, log_path=path))

    async def reopen_container_log(self, container_id: str) -> None:
        if self.reopen_fails:
            raise errors.CRIError("ReopenContainerLog", grpc.StatusCode.FAILED_PRECONDITION, "container is not running")
        self.reopened.append(container_id)
        open(self.containers[container_id][1], "ab").close()


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=timezone.utc)

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=10)
        return self.now


@pytest.fixture
def logs_root(tmp_path) -> pathlib.Path:
    return tmp_path / "logs"


def add_container(runtime: LogRuntime, logs_root: pathlib.Path, cid: str, size: int,
                  state: int = api.CONTAINER_RUNNING) -> pathlib.Path:
    path = logs_root / f"default_{cid}_uid-{cid}" / "main" / "0.log"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"x" * size)
    runtime.containers[cid] = (state, str(path))
    return path


def manager(runtime: LogRuntime, logs_root: pathlib.Path, **settings) -> ContainerLogManager:
    options = {"max_size": "1Ki", "max_files": 3, "max_workers": 1, "monitor_interval": 3.0, **settings}
    return ContainerLogManager(runtime, ContainerLogSettings(**options), str(logs_root), Clock())


async def test_a_log_at_max_size_is_renamed_and_reopened_a_smaller_one_is_left(logs_root):
    runtime = LogRuntime()
    big = add_container(runtime, logs_root, "big", 1024)
    small = add_container(runtime, logs_root, "small", 1023)
    await manager(runtime, logs_root).rotate_round()
    assert sorted(os.listdir(big.parent)) == ["0.log", "0.log.20260101-000010"]
    assert big.stat().st_size == 0 and (big.parent / "0.log.20260101-000010").stat().st_size == 1024
    assert os.listdir(small.parent) == ["0.log"] and small.stat().st_size == 1023
    assert runtime.reopened == ["big"]


async def test_rounds_keep_at_most_max_files_and_compress_all_but_the_newest_rotation(logs_root):
    runtime = LogRuntime()
    live = add_container(runtime, logs_root, "chatty", 2048)
    rotation = manager(runtime, logs_root, max_files=4)
    for round_number in range(6):
        live.write_bytes(f"round {round_number}\n".encode() * 200)
        await rotation.rotate_round()
    names = sorted(os.listdir(live.parent))
    assert names == ["0.log", "0.log.20260101-000040.gz", "0.log.20260101-000050.gz", "0.log.20260101-000100"]
    assert gzip.decompress((live.parent / names[2]).read_bytes()) == b"round 4\n" * 200
    assert (live.parent / names[3]).read_bytes() == b"round 5\n" * 200


async def test_a_failed_reopen_gives_the_live_file_its_name_back(logs_root):
    runtime = LogRuntime()
    live = add_container(runtime, logs_root, "c1", 4096)
    runtime.reopen_fails = True
    await manager(runtime, logs_root).rotate_round()
    assert os.listdir(live.parent) == ["0.log"] and live.stat().st_size == 4096


async def test_a_missing_live_file_is_reopened(logs_root):
    runtime = LogRuntime()
    live = add_container(runtime, logs_root, "c1", 0)
    live.unlink()
    await manager(runtime, logs_root).rotate_round()
    assert runtime.reopened == ["c1"] and live.exists()


async def test_only_running_containers_with_logs_below_the_pod_logs_dir_are_rotated(tmp_path, logs_root):
    runtime = LogRuntime()
    exited = add_container(runtime, logs_root, "exited", 4096, state=api.CONTAINER_EXITED)
    foreign = tmp_path / "elsewhere" / "c" / "0.log"
    foreign.parent.mkdir(parents=True)
    foreign.write_bytes(b"x" * 4096)
    runtime.containers["foreign"] = (api.CONTAINER_RUNNING, str(foreign))
    await manager(runtime, logs_root).rotate_round()
    assert os.listdir(exited.parent) == ["0.log"] and os.listdir(foreign.parent) == ["0.log"]
    assert runtime.reopened == []


async def test_a_symlink_as_the_live_log_is_left_alone_and_the_others_still_rotate(tmp_path, logs_root):
    runtime = LogRuntime()
    linked = add_container(runtime, logs_root, "linked", 0)
    target = tmp_path / "target"
    target.write_bytes(b"x" * 4096)
    linked.unlink()
    linked.symlink_to(target)
    fine = add_container(runtime, logs_root, "fine", 4096)
    await manager(runtime, logs_root).rotate_round()
    assert os.listdir(linked.parent) == ["0.log"] and target.stat().st_size == 4096
    assert len(os.listdir(fine.parent)) == 2


@pytest.mark.parametrize("workers", [1, 3])
async def test_at_most_max_workers_containers_at_once(logs_root, workers):
    runtime = LogRuntime()
    for i in range(6):
        add_container(runtime, logs_root, f"c{i}", 10)
    await manager(runtime, logs_root, max_workers=workers).rotate_round()
    assert runtime.most_in_status == workers


def test_a_negative_max_size_turns_rotation_off(logs_root):
    assert not manager(LogRuntime(), logs_root, max_size="-1").enabled
    assert manager(LogRuntime(), logs_root, max_size="0").enabled


async def test_the_loop_goes_on_after_a_failed_list_and_ends_when_cancelled(logs_root, monkeypatch):
    runtime = LogRuntime()
    calls = []

    async def failing_list(label_selector=None):
        calls.append(1)
        raise errors.Unavailable("ListContainers", grpc.StatusCode.UNAVAILABLE, "connection refused")
    monkeypatch.setattr(runtime, "list_containers", failing_list)
    rotation = manager(runtime, logs_root, monitor_interval=0.01)
    task = asyncio.create_task(rotation.run())
    while len(calls) < 3:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
