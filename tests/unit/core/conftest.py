"""The `node` fixture: the core on a fresh fake runtime, stopped after the test."""

from __future__ import annotations

import faulthandler
import tempfile

import pytest

from tests import progress
from tests.fakes.runtime import FakeRuntime
from tests.unit.core.harness import Core, clock

# Under looptime a core test takes well under a few seconds of wall time. One of them
# (test_resize.py's memory limit test) has taken 70-120 s inside the whole suite, and 0.2 s
# alone or after the runtime, network, kubeadm or multinode tier: every this many seconds every
# thread's stack is taken, and shown past pytest's capture, so the next run shows where it goes.
STACKS_AFTER_SECONDS = 20


@pytest.fixture(autouse=True)
def stacks_if_slow(request):
    with tempfile.TemporaryFile("w+") as stacks:
        faulthandler.dump_traceback_later(STACKS_AFTER_SECONDS, repeat=True, file=stacks)
        try:
            yield
        finally:
            faulthandler.cancel_dump_traceback_later()
            stacks.seek(0)
            if taken := stacks.read():
                progress.say("slow core test", f"{request.node.nodeid} after {STACKS_AFTER_SECONDS}s:\n{taken}")


@pytest.fixture
async def node(tmp_path):
    runtime = FakeRuntime(clock)
    core = Core(runtime, tmp_path).start()
    yield core
    await core.stop()
