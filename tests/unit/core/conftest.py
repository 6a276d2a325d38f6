"""The `node` fixture: the core on a fresh fake runtime, stopped after the test."""

from __future__ import annotations

import pytest

from tests.fakes.runtime import FakeRuntime
from tests.unit.core.harness import Core, clock


@pytest.fixture
async def node(tmp_path):
    runtime = FakeRuntime(clock)
    core = Core(runtime, tmp_path).start()
    yield core
    await core.stop()
