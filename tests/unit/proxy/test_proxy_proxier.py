"""What a sync is: nothing before both lists are in; full the first time, after a failure and
periodically; otherwise only the Service ports that changed."""

from __future__ import annotations

from pykubelet.proxy.health import HealthState
from pykubelet.proxy.inputs import Inputs
from pykubelet.proxy.iptables_rules import PortRules
from pykubelet.proxy.proxier import Proxier
from tests.unit.proxy.test_proxy_inputs import address, endpoint_slice, objects, service


class FakeBackend:
    mode = "fake"

    def __init__(self):
        self.calls = []
        self.fail = False
        self.lost = False

    async def sync(self, ports, changed, large):
        self.calls.append((sorted(str(p) for p in ports), None if changed is None else sorted(map(str, changed))))
        if self.fail:
            raise RuntimeError("iptables-restore failed")
        return {name: PortRules() for name in ports}

    async def lost_rules(self):
        return self.lost


def make(services, slices, ready=True):
    backend, health = FakeBackend(), HealthState(timeout=60)
    state = {"services": services, "slices": slices}
    proxier = Proxier(backend, Inputs("node-a"), lambda: state["services"], lambda: state["slices"], lambda: ready,
                      health)
    return proxier, backend, state


async def test_nothing_is_synced_before_services_and_slices_are_listed():
    proxier, backend, _ = make(objects(service()), {}, ready=False)
    assert await proxier.sync(periodic=False)
    assert backend.calls == []


async def test_full_first_then_only_what_changed_then_full_after_a_failure():
    slices = objects(endpoint_slice("web-1", endpoints=[address("10.244.0.1")]))
    proxier, backend, state = make(objects(service(), service("db")), slices)
    await proxier.sync(periodic=False)
    assert backend.calls[-1] == (["ns/db:http", "ns/web:http"], None)
    state["slices"] = objects(endpoint_slice("web-1", version="2", endpoints=[address("10.244.0.2")]))
    await proxier.sync(periodic=False)
    assert backend.calls[-1][1] == ["ns/web:http"]
    state["services"] = objects(service())
    await proxier.sync(periodic=False)
    assert backend.calls[-1] == (["ns/web:http"], ["ns/db:http"])  # gone: its rules go
    backend.fail = True
    assert not await proxier.sync(periodic=False)
    backend.fail = False
    assert await proxier.sync(periodic=False)
    assert backend.calls[-1][1] is None


async def test_the_periodic_sync_is_full_unless_the_cluster_is_large_and_the_rules_are_still_there():
    proxier, backend, state = make(objects(service()), objects(endpoint_slice("web-1", endpoints=[
        address(f"10.244.{i // 250}.{i % 250}") for i in range(1001)])))
    await proxier.sync(periodic=False)
    await proxier.sync(periodic=True)
    assert backend.calls[-1][1] == []  # large: a partial sync with nothing to change
    backend.lost = True
    await proxier.sync(periodic=True)
    assert backend.calls[-1][1] is None
    state["slices"] = {}
    await proxier.sync(periodic=False)
    await proxier.sync(periodic=True)
    assert backend.calls[-1][1] is None  # small: every periodic sync is a full one
