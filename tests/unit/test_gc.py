"""Which dead containers and sandboxes of a live pod are removed, and which are kept for logs and lastState."""

from __future__ import annotations

from pykubelet.runtime.gc import dead_to_remove
from pykubelet.runtime.state import CREATED, EXITED, RUNNING, UNKNOWN, ContainerState, PodRuntimeState, SandboxState


def c(id: str, name: str, state: str, created_at: float, sandbox_id: str) -> ContainerState:
    return ContainerState(id=id, name=name, state=state, restart_count=0, hash="h", created_at=created_at,
                          sandbox_id=sandbox_id)


def s(id: str, ready: bool, created_at: float) -> SandboxState:
    return SandboxState(id=id, attempt=0, ready=ready, created_at=created_at)


def pod(sandboxes: list[SandboxState], containers: list[ContainerState]) -> PodRuntimeState:
    return PodRuntimeState(uid="uid1",
                           sandboxes=sorted(sandboxes, key=lambda x: x.created_at, reverse=True),
                           containers=sorted(containers, key=lambda x: x.created_at, reverse=True))


def test_running_containers_and_the_newest_exited_one_per_name_are_kept():
    state = pod([s("sb1", True, 1)], [
        c("app-3", "app", RUNNING, 40, "sb1"),
        c("app-2", "app", EXITED, 30, "sb1"),   # the previous run: `logs --previous`, lastState
        c("app-1", "app", EXITED, 20, "sb1"),
        c("app-0", "app", EXITED, 10, "sb1"),
        c("side-1", "side", EXITED, 25, "sb1"),
        c("side-0", "side", EXITED, 15, "sb1"),
    ])
    containers, sandboxes = dead_to_remove(state)
    assert sorted(containers) == ["app-0", "app-1", "side-0"]
    assert sandboxes == []


def test_unknown_state_containers_are_never_removed():
    state = pod([s("sb1", True, 1)], [c("a2", "app", UNKNOWN, 30, "sb1"), c("a1", "app", UNKNOWN, 20, "sb1")])
    assert dead_to_remove(state) == ([], [])


def test_created_container_counts_as_a_dead_instance():
    state = pod([s("sb1", True, 1)], [c("a2", "app", CREATED, 30, "sb1"), c("a1", "app", EXITED, 20, "sb1")])
    assert dead_to_remove(state)[0] == ["a1"]


def test_dead_sandboxes_without_kept_containers_are_removed_but_not_the_newest():
    state = pod([s("sb3", False, 300), s("sb2", False, 200), s("sb1", False, 100)], [
        c("app-1", "app", EXITED, 250, "sb2"),   # newest instance: kept, so sb2 is kept
        c("app-0", "app", EXITED, 150, "sb1"),   # removed, so sb1 can go
    ])
    containers, sandboxes = dead_to_remove(state)
    assert containers == ["app-0"]
    assert sandboxes == ["sb1"]


def test_ready_sandbox_is_kept_even_when_empty():
    state = pod([s("sb2", False, 200), s("sb1", True, 100)], [])
    assert dead_to_remove(state) == ([], [])


def test_sandbox_holding_a_running_container_is_kept():
    state = pod([s("sb3", True, 300), s("sb2", False, 200), s("sb1", False, 100)], [
        c("old", "app", RUNNING, 150, "sb1"),
    ])
    assert dead_to_remove(state)[1] == ["sb2"]


def test_nothing_to_remove_for_an_empty_pod():
    assert dead_to_remove(PodRuntimeState(uid="uid1")) == ([], [])
