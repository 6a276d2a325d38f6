"""The node's heartbeats (Lease renewals) never wait behind the agent's other apiserver traffic:
they go through a client of their own with no client-side rate limit, while the main client
keeps its kubeAPIQPS token bucket; a credential reload reaches both."""

from __future__ import annotations

import asyncio
import time

from pykubelet.kube import client as client_module
from pykubelet.kube.client import KubeClient
from tests.fakes.kube import FakeKube
from tests.unit.test_node_registration import manager


class FakeResponse:
    status = 200

    async def read(self) -> bytes:
        return b"{}"

    def release(self) -> None:
        pass


class FakeApiClient:
    """Answers every call at once, and remembers it."""

    def __init__(self, name: str):
        self.name, self.calls, self.closed = name, [], False
        self.configuration = type("Configuration", (), {"host": "https://apiserver:6443"})()
        self.user_agent = ""

    async def call_api(self, path, method, **_):
        self.calls.append((method, path))
        return FakeResponse()

    async def close(self) -> None:
        self.closed = True


async def test_heartbeats_are_not_throttled_behind_a_saturated_main_client(monkeypatch):
    made: list[FakeApiClient] = []

    async def api_client(kubeconfig, client_pem, user_agent):
        made.append(FakeApiClient(f"pool{len(made)}"))
        return made[-1]
    monkeypatch.setattr(client_module, "_api_client", api_client)
    main = KubeClient(FakeApiClient("main"), qps=1, burst=1, user_agent="t", reload=("kubeconfig", ""))
    heartbeat = await main.heartbeat_client(timeout=10)
    await main.get("/api/v1/pods")  # the one burst token: everything after waits ~1 s each
    backlog = [asyncio.ensure_future(main.create("/apis/authentication.k8s.io/v1/tokenreviews", {}))
               for _ in range(5)]
    started = time.monotonic()
    for _ in range(20):
        await heartbeat.replace("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1", {})
    assert time.monotonic() - started < 0.5
    assert not any(b.done() for b in backlog)  # the main client's queue is still waiting its turn
    assert len(made[0].calls) == 20 and all(method == "PUT" for method, _ in made[0].calls)
    for b in backlog:
        b.cancel()

    await main.reload_credentials()
    assert made[0].closed and len(made) == 3  # the heartbeat pool was rebuilt with the new credentials
    await heartbeat.get("/healthz")
    assert made[2].calls == [("GET", "/healthz")]
    await main.close()


async def test_the_lease_is_renewed_through_the_heartbeat_client():
    kube, heartbeat = FakeKube(), FakeKube()
    node = manager(kube, heartbeat=heartbeat)
    node.node_uid = "uid-1"
    path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1"
    await node._renew(path, None)  # created
    lease = await node._renew(path, None)  # read and renewed
    assert [verb for verb, *_ in heartbeat.writes] == ["create", "replace"]
    assert lease["spec"]["holderIdentity"] == "n1" and lease["spec"]["leaseDurationSeconds"] == 40
    assert kube.writes == []
