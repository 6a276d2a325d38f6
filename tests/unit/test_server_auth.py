"""Authentication and authorization of the kubelet API: the path -> subresource mapping, tokens
through TokenReview (cached), never anonymous for a bad credential, SAR decisions cached."""

from __future__ import annotations

import pytest

from pykubelet.config import AuthnSettings, AuthzSettings
from pykubelet.server import auth
from pykubelet.server.auth import Authenticator, Authorizer, Denied, User


@pytest.mark.parametrize("path, expected", [
    ("/healthz", ["healthz", "proxy"]), ("/healthz/ping", ["healthz", "proxy"]), ("/pods", ["pods", "proxy"]),
    ("/pods/", ["pods", "proxy"]), ("/runningpods/", ["pods", "proxy"]), ("/configz", ["configz", "proxy"]),
    ("/stats/summary", ["stats"]), ("/metrics", ["metrics"]), ("/metrics/resource", ["metrics"]),
    ("/metrics/cadvisor", ["metrics"]),
    ("/logs/syslog", ["log"]), ("/containerLogs/ns/p/c", ["proxy"]), ("/exec/ns/p/c", ["proxy"]),
    ("/portForward/ns/p", ["proxy"]), ("/podsx", ["proxy"]), ("/metricsx", ["proxy"]),
])
def test_paths_map_to_the_kubelets_subresources(path, expected):
    assert auth.subresources(path) == expected


class FakeApiserver:
    def __init__(self, tokens=None, allowed=()):
        self.tokens, self.allowed, self.calls = tokens or {}, set(allowed), []

    async def __call__(self, path, body):
        self.calls.append(path)
        if path.endswith("tokenreviews"):
            user = self.tokens.get(body["spec"]["token"])
            return {"status": {"authenticated": user is not None, "user": {"username": user, "groups": ["g"]}}}
        attrs = body["spec"]["resourceAttributes"]
        return {"status": {"allowed": (body["spec"]["user"], attrs["verb"], attrs["subresource"]) in self.allowed}}


async def test_tokens_are_reviewed_once_per_ttl():
    api = FakeApiserver({"good": "alice"})
    authn = Authenticator(AuthnSettings(), api)
    user = await authn.authenticate({"Authorization": "Bearer good"}, None)
    assert user.name == "alice" and user.groups == ("g",)
    await authn.authenticate({"Authorization": "Bearer good"}, None)
    assert len(api.calls) == 1


async def test_bad_or_missing_credentials_are_401_even_with_anonymous_on():
    authn = Authenticator(AuthnSettings(anonymous_enabled=True), FakeApiserver())
    with pytest.raises(Denied) as e:
        await authn.authenticate({"Authorization": "Bearer bad"}, None)
    assert (e.value.status, e.value.body) == (401, "Unauthorized")
    anonymous = await authn.authenticate({}, None)
    assert anonymous == User("system:anonymous", ("system:unauthenticated",))
    with pytest.raises(Denied):
        await Authenticator(AuthnSettings(), FakeApiserver()).authenticate({}, None)


async def test_an_apiserver_error_is_401_and_not_cached():
    async def broken(path, body):
        raise ConnectionError("down")
    authn = Authenticator(AuthnSettings(), broken)
    with pytest.raises(Denied):
        await authn.authenticate({"Authorization": "Bearer x"}, None)
    assert authn._tokens.get("x") is None


async def test_client_certificates_give_cn_and_o():
    authn = Authenticator(AuthnSettings(webhook_enabled=False), None)
    cert = {"subject": ((("organizationName", "system:masters"),), (("commonName", "kube-apiserver"),))}
    user = await authn.authenticate({}, cert)
    assert user.name == "kube-apiserver" and "system:masters" in user.groups


async def test_either_subresource_allows_and_denial_names_both():
    api = FakeApiserver(allowed={("bob", "get", "proxy")})
    authz = Authorizer(AuthzSettings(), "node1", api)
    await authz.authorize(User("bob"), "GET", "/healthz")  # healthz denied, proxy allowed
    with pytest.raises(Denied) as e:
        await authz.authorize(User("bob"), "POST", "/pods")
    assert e.value.status == 403
    assert e.value.body == "Forbidden (user=bob, verb=create, resource=nodes, subresource(s)=[pods proxy])\n"


async def test_decisions_are_cached_and_always_allow_asks_nobody():
    api = FakeApiserver(allowed={("bob", "get", "stats")})
    authz = Authorizer(AuthzSettings(), "node1", api)
    for _ in range(3):
        await authz.authorize(User("bob"), "GET", "/stats/summary")
    assert len(api.calls) == 1
    await Authorizer(AuthzSettings(mode="AlwaysAllow"), "node1", None).authorize(User("x"), "GET", "/pods")


async def test_no_apiserver_to_ask_is_an_authorization_error():
    with pytest.raises(Denied) as e:
        await Authorizer(AuthzSettings(), "node1", None).authorize(User("x"), "GET", "/metrics")
    assert e.value.status == 500 and e.value.body.startswith("Authorization error (user=x, verb=get")


def test_ttl_cache_expires_and_stays_bounded(monkeypatch):
    cache = auth.TTLCache(max_entries=3)
    now = [100.0]
    monkeypatch.setattr(auth.time, "monotonic", lambda: now[0])
    cache.put("a", 1, 10)
    now[0] = 111
    assert cache.get("a") is None
    for key in "bcdef":
        cache.put(key, 1, 10)
    assert len(cache._entries) <= 3
