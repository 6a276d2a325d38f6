"""Reviews in flight on the kubelet API: identical ones share one apiserver request, distinct ones
are capped (429 at once over the cap, never a queue), negative answers are cached, and the
access-review cache tells apart users that differ only in their extra attributes."""

from __future__ import annotations

import asyncio

import pytest

from pykubelet.config import AuthnSettings, AuthzSettings
from pykubelet.server.auth import Authenticator, Authorizer, Denied, User, access_key
from pykubelet.server.review_limits import InflightReviews, TooManyReviews


class SlowApiserver:
    """Answers every review only when released; counts what it was asked."""

    def __init__(self, allowed_users=()):
        self.release = asyncio.Event()
        self.tokens: list[str] = []
        self.access: list[dict] = []
        self.allowed_users = set(allowed_users)

    async def __call__(self, path, body):
        await self.release.wait()
        if path.endswith("tokenreviews"):
            self.tokens.append(body["spec"]["token"])
            return {"status": {"authenticated": False}}
        self.access.append(body["spec"])
        return {"status": {"allowed": body["spec"]["user"] in self.allowed_users}}


async def test_identical_reviews_in_flight_share_one_request():
    limits = InflightReviews(limit=1)
    calls = 0

    async def review():
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.01)
        return "answer"

    answers = await asyncio.gather(*(limits.run("same", review) for _ in range(50)))
    assert answers == ["answer"] * 50 and calls == 1 and limits.in_flight == 0


async def test_over_the_cap_a_new_review_is_refused_at_once_and_the_cap_frees_up():
    limits, gate = InflightReviews(limit=2), asyncio.Event()

    async def review():
        await gate.wait()
        return True

    first = [asyncio.ensure_future(limits.run(key, review)) for key in ("a", "b")]
    await asyncio.sleep(0)
    with pytest.raises(TooManyReviews):
        await asyncio.wait_for(limits.run("c", review), 0.1)
    gate.set()
    assert await asyncio.gather(*first) == [True, True]
    assert await limits.run("c", review) is True


async def test_a_waiter_that_goes_away_does_not_cancel_the_shared_review():
    limits, gate = InflightReviews(), asyncio.Event()

    async def review():
        await gate.wait()
        return 7

    impatient = asyncio.ensure_future(limits.run("k", review))
    patient = asyncio.ensure_future(limits.run("k", review))
    await asyncio.sleep(0)
    impatient.cancel()
    gate.set()
    assert await patient == 7


async def test_a_token_flood_gets_401_for_the_reviewed_and_429_past_the_cap_without_queueing():
    api = SlowApiserver()
    authn = Authenticator(AuthnSettings(), api, InflightReviews(limit=4))
    requests = [asyncio.ensure_future(authn.authenticate({"Authorization": f"Bearer bogus-{i}"}, None))
                for i in range(20)]
    await asyncio.sleep(0.05)
    refused = [r for r in requests if r.done()]
    assert len(refused) == 16  # answered at once, while the 4 reviews wait for the apiserver
    assert all(r.exception().status == 429 and r.exception().headers == {"Retry-After": "1"} for r in refused)
    api.release.set()
    results = await asyncio.gather(*requests, return_exceptions=True)
    assert sorted(e.status for e in results) == [401] * 4 + [429] * 16
    assert len(api.tokens) == 4


async def test_a_rejected_token_is_remembered_and_concurrent_repeats_cost_one_review():
    api = SlowApiserver()
    api.release.set()
    authn = Authenticator(AuthnSettings(), api, InflightReviews(limit=1))
    results = await asyncio.gather(*(authn.authenticate({"Authorization": "Bearer same"}, None)
                                     for _ in range(30)), return_exceptions=True)
    assert {e.status for e in results} == {401}
    with pytest.raises(Denied) as again:
        await authn.authenticate({"Authorization": "Bearer same"}, None)
    assert again.value.status == 401 and api.tokens == ["same"]


async def test_access_reviews_past_the_cap_are_429():
    api = SlowApiserver(allowed_users={"u0"})
    authz = Authorizer(AuthzSettings(), "node1", api, InflightReviews(limit=1))
    first = asyncio.ensure_future(authz.authorize(User("u0"), "GET", "/metrics"))
    await asyncio.sleep(0)
    with pytest.raises(Denied) as e:
        await authz.authorize(User("u1"), "GET", "/metrics")
    assert e.value.status == 429
    api.release.set()
    await first


def test_the_access_cache_key_includes_the_users_extra_attributes():
    plain = User("alice", ("g",), "1")
    scoped = User("alice", ("g",), "1", {"scopes.authorization.openshift.io": ["user:info"]})
    reordered = User("alice", ("g",), "1", {"b": ["2"], "a": ["1"]})
    assert access_key(plain, "get", "proxy") != access_key(scoped, "get", "proxy")
    assert access_key(reordered, "get", "proxy") == access_key(User("alice", ("g",), "1", {"a": ["1"], "b": ["2"]}),
                                                               "get", "proxy")


async def test_users_differing_only_in_extra_get_separate_access_reviews():
    api = SlowApiserver(allowed_users={"alice"})
    api.release.set()
    authz = Authorizer(AuthzSettings(), "node1", api)
    await authz.authorize(User("alice", extra={"k": ["1"]}), "GET", "/metrics")
    await authz.authorize(User("alice", extra={"k": ["2"]}), "GET", "/metrics")
    await authz.authorize(User("alice", extra={"k": ["2"]}), "GET", "/metrics")
    assert [spec["extra"] for spec in api.access] == [{"k": ["1"]}, {"k": ["2"]}]
