"""The runtime seam: CRIClient and the fake runtime both offer every call the pod path makes,
with the same parameters, so the unit tests of the core exercise what production calls."""

from __future__ import annotations

import inspect

import pytest

from pykubelet.cri.client import CRIClient
from pykubelet.runtime.service import Runtime
from tests.fakes.runtime import FakeRuntime

CALLS = [name for name, value in vars(Runtime).items() if callable(value) and not name.startswith("_")]


@pytest.mark.parametrize("implementation", [CRIClient, FakeRuntime])
@pytest.mark.parametrize("call", CALLS)
def test_every_call_of_the_seam_is_implemented_with_its_parameters(implementation, call):
    wanted = list(inspect.signature(getattr(Runtime, call)).parameters)
    assert list(inspect.signature(getattr(implementation, call)).parameters) == wanted


def test_the_seam_names_the_calls_the_pod_path_makes():
    assert {"list_pod_sandbox", "list_containers", "container_status", "run_pod_sandbox", "create_container",
            "start_container", "stop_container", "remove_container", "task_events"} <= set(CALLS)
