"""Every test session that touched the machine ends by proving that it left nothing behind.

The accounting is `pykubelet leaks` (pykubelet/tools/leaks.py): no sandbox or container in the
runtime, and nothing a pod held — shim, netns, IP reservation, attachment record, mount, pod
cgroup, portmap rule — without a live sandbox to own it. Any leak fails the session.

"As they found it" is measured: what was already on the machine when the session started (left
by an earlier run that was killed, say) is reported, not blamed on this run.
"""

from __future__ import annotations

import pathlib
import tempfile

import pytest

from pykubelet.tools.leaks import Node, account, not_in, report
from tests import progress
from tests.helpers import run_to_completion


# Tiers that only compute: nothing of theirs can be left on the machine.
PURE_TIERS = ("unit", "bench")
# Tiers that never use the test bed's containerd and account for what they leave themselves (the
# kind tier: docker's containers and volumes, tests/kind/conftest.py).
OWN_ACCOUNTING_TIERS = ("kind",)


def _touched_the_machine(items: list[pytest.Item]) -> bool:
    tests = pathlib.Path(__file__).parent
    for item in items:
        relative = pathlib.Path(str(item.path)).resolve().relative_to(tests.resolve())
        if relative.parts[0] not in PURE_TIERS + OWN_ACCOUNTING_TIERS:
            return True
    return False


def pytest_configure(config: pytest.Config) -> None:
    progress.attach(config)  # long fixtures say what they wait for (tests/progress.py)


RELEASED_BY_THE_NEXT_AGENT = ("ip", "attachment", "rule", "cgroup")


def _release_like_the_next_agent(found: list) -> None:
    """The runtime and cluster tiers remove their pods through CRI after stopping the agent,
    as a crashed node's pods would go. Their network (IP, portmap rules) and cgroups are then
    released by the next agent of that node when it starts (the network at once, cgroups in
    housekeeping) — so start it, once, and wait until it has."""
    from tests.helpers import wait_for
    from tests.runtime.conftest import SHARED_NETWORK_STATE, AgentProcess

    node = Node(root_dirs=[str(SHARED_NETWORK_STATE.parent)])

    async def held() -> list:
        return [leak for leak in not_in(await account(node), found) if leak.kind in RELEASED_BY_THE_NEXT_AGENT]
    if not run_to_completion(held()):
        return
    with tempfile.TemporaryDirectory(prefix="pkl-last-agent-") as tmp:
        workdir = pathlib.Path(tmp)
        (workdir / "manifests").mkdir()
        agent = AgentProcess(workdir, workdir / "manifests").start()

        async def released() -> bool:
            return not await held()
        try:
            run_to_completion(wait_for(released, 90, "the next agent to release the network and cgroups of "
                                       "removed pods", interval=0.5, describe=agent.describe))
        finally:
            agent.shutdown()


def _this_node() -> Node:
    from tests.runtime.conftest import ENDPOINT, SHARED_NETWORK_STATE

    return Node(endpoints=[ENDPOINT], root_dirs=[str(SHARED_NETWORK_STATE.parent)])


@pytest.fixture(scope="session", autouse=True)
def machine_left_as_found(request):
    touched = _touched_the_machine(request.session.items)
    found = run_to_completion(account(_this_node(), expect_no_pods=True)) if touched else []
    yield
    if not touched:
        return
    node = _this_node()
    pods_left = [leak for leak in not_in(run_to_completion(account(node, expect_no_pods=True)), found)
                 if leak.kind in ("sandbox", "container")]
    if not pods_left:
        _release_like_the_next_agent(found)
    leaks = run_to_completion(account(node, expect_no_pods=True))
    left = not_in(leaks, found)
    if before := [leak for leak in leaks if leak not in left]:
        print(f"\nalready on the machine before the tests started (not left by them):\n{report(before)}")
    if left:
        pytest.fail(f"the tests left this on the machine:\n{report(left)}", pytrace=False)
