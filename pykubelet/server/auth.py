"""Authentication and authorization of every request on the kubelet API, /healthz included.

Who: a client certificate verified against the client CA (user = CN, groups = O); else a bearer
token checked by the apiserver's TokenReview (answers reused for cacheTTL); else, only when
anonymous auth is on, system:anonymous. A token that does not check out is a 401, never anonymous.

What: the kubelet maps the HTTP method to a verb and the path to subresources of the Node
(nodes/proxy, nodes/log, nodes/stats, nodes/metrics, nodes/healthz, nodes/pods, nodes/configz)
and asks the apiserver's SubjectAccessReview; some paths have two subresources and either one
allowing suffices (the specific one, then proxy). Allowed answers are reused for 5 minutes,
denied ones for 30 seconds; or every request is allowed (AlwaysAllow).

Reviews in flight are capped and identical ones shared (review_limits.py): over the cap the
answer is 429, as a token nobody has seen yet must not make everyone else wait.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Mapping

from pykubelet.config import AuthnSettings, AuthzSettings
from pykubelet.server.review_limits import InflightReviews, TooManyReviews
from pykubelet.util.log import get_logger

log = get_logger(__name__)

ANONYMOUS = "system:anonymous"
UNAUTHENTICATED = "system:unauthenticated"
AUTHENTICATED = "system:authenticated"

Review = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]
"""POSTs a review object to the apiserver path given and returns the answer (raises on failure)."""

VERBS = {"POST": "create", "GET": "get", "HEAD": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: dict[str, list[str]] = field(default_factory=dict, compare=False, hash=False)


class Denied(Exception):
    """The request may not go on: status and body are what the kubelet answers."""

    def __init__(self, status: int, body: str):
        super().__init__(body)
        self.status, self.body = status, body

    @property
    def headers(self) -> dict[str, str]:
        return {"Retry-After": "1"} if self.status == 429 else {}


def too_many_requests() -> Denied:
    return Denied(429, "Too many requests, please try again later.\n")


class TTLCache:
    """A small dict whose entries expire; bounded so a flood of distinct keys cannot grow it forever."""

    def __init__(self, max_entries: int = 4096):
        self._entries: dict[Any, tuple[float, Any]] = {}
        self.max_entries = max_entries

    def get(self, key: Any) -> Any:
        entry = self._entries.get(key)
        if entry is None or entry[0] < time.monotonic():
            self._entries.pop(key, None)
            return None
        return entry[1]

    def put(self, key: Any, value: Any, ttl: float) -> None:
        if ttl <= 0:
            return
        if len(self._entries) >= self.max_entries:
            now = time.monotonic()
            self._entries = {k: e for k, e in self._entries.items() if e[0] >= now}
            if len(self._entries) >= self.max_entries:
                self._entries.pop(next(iter(self._entries)))
        self._entries[key] = (time.monotonic() + ttl, value)


def user_from_certificate(peercert: Mapping[str, Any]) -> User | None:
    """user = CN, groups = every O of a certificate the TLS layer verified against the client CA."""
    names: dict[str, list[str]] = {}
    for rdn in peercert.get("subject", ()):
        for key, value in rdn:
            names.setdefault(key, []).append(value)
    common = names.get("commonName")
    if not common:
        return None
    return User(common[0], tuple(names.get("organizationName", [])) + (AUTHENTICATED,))


class Authenticator:
    def __init__(self, settings: AuthnSettings, review: Review | None, in_flight: InflightReviews | None = None):
        self.settings = settings
        self.review = review if settings.webhook_enabled else None
        self.in_flight = in_flight or InflightReviews()
        self._tokens = TTLCache()
        if settings.webhook_enabled and review is None:
            log.warning("Token authentication of the kubelet API needs an apiserver (--kubeconfig): "
                        "bearer tokens will be refused")

    async def authenticate(self, headers: Mapping[str, str], peercert: Mapping[str, Any] | None) -> User:
        """The request's user, or Denied(401)."""
        if peercert:
            user = user_from_certificate(peercert)
            if user is not None:
                return user
            raise Denied(401, "Unauthorized")
        token = bearer_token(headers)
        if token is not None and self.settings.webhook_enabled:
            return await self._token_user(token)
        if self.settings.anonymous_enabled:
            return User(ANONYMOUS, (UNAUTHENTICATED,))
        raise Denied(401, "Unauthorized")

    async def _token_user(self, token: str) -> User:
        key = hashlib.sha256(token.encode()).hexdigest()
        cached = self._tokens.get(key)
        if cached is None:
            if self.review is None:
                raise Denied(401, "Unauthorized")
            try:
                cached = await self.in_flight.run(("token", key), lambda: self._review_token(key, token))
            except TooManyReviews:
                raise too_many_requests() from None
        if cached[0] != "ok":
            raise Denied(401, "Unauthorized")
        return cached[1]

    async def _review_token(self, key: str, token: str) -> tuple[str, User | None]:
        """Ask the apiserver; the answer, yes or no, is kept for cacheTTL (the kubelet keeps both)."""
        assert self.review is not None
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        try:
            answer = await self.review("/apis/authentication.k8s.io/v1/tokenreviews", body)
        except Exception as e:  # an apiserver that cannot answer: no identity, and nothing cached
            log.warning("Unable to authenticate the request due to an error", err=str(e))
            raise Denied(401, "Unauthorized") from None
        status = answer.get("status") or {}
        cached = ("ok", _user_of(status.get("user") or {})) if status.get("authenticated") else ("no", None)
        self._tokens.put(key, cached, self.settings.webhook_cache_ttl)
        return cached


def _user_of(info: Mapping[str, Any]) -> User:
    return User(info.get("username", ""), tuple(info.get("groups") or ()), info.get("uid", ""),
                dict(info.get("extra") or {}))


def bearer_token(headers: Mapping[str, str]) -> str | None:
    value = headers.get("Authorization", "")
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def _is_subpath(path: str, prefix: str) -> bool:
    prefix = prefix.rstrip("/")
    return path == prefix or path.startswith(prefix + "/")


def subresources(path: str) -> list[str]:
    """The Node subresources a request path needs, as the kubelet maps them (either one suffices)."""
    out = []
    for prefix, name in (("/pods", "pods"), ("/healthz", "healthz"), ("/configz", "configz"),
                         ("/runningpods/", "pods")):
        if _is_subpath(path, prefix):
            out.append(name)
            break
    for prefix, name in (("/stats/", "stats"), ("/metrics", "metrics"), ("/logs/", "log"),
                         ("/checkpoint/", "checkpoint"), ("/statusz", "statusz"), ("/flagz", "configz")):
        if _is_subpath(path, prefix):
            out.append(name)
            break
    else:
        out.append("proxy")
    return out


def access_key(user: User, verb: str, subresource: str) -> tuple[Any, ...]:
    """Everything a SubjectAccessReview asks about: two requests with the same key get the same answer."""
    extra = tuple(sorted((name, tuple(values)) for name, values in user.extra.items()))
    return (user.name, user.groups, user.uid, extra, verb, subresource)


class Authorizer:
    def __init__(self, settings: AuthzSettings, node_name: str, review: Review | None,
                 in_flight: InflightReviews | None = None):
        self.settings = settings
        self.node_name = node_name
        self.review = review
        self.in_flight = in_flight or InflightReviews()
        self._decisions = TTLCache()
        if settings.mode == "Webhook" and review is None:
            log.warning("Webhook authorization of the kubelet API needs an apiserver (--kubeconfig): every "
                        "request will fail; use --authorization-mode AlwaysAllow on a standalone node")

    async def authorize(self, user: User, method: str, path: str) -> None:
        """Return if allowed; Denied(403) if not, Denied(500) if the apiserver could not say."""
        if self.settings.mode == "AlwaysAllow":
            return
        verb = VERBS.get(method, "")
        needed = subresources(path)
        for subresource in needed:
            if await self._allowed(user, verb, subresource):
                return
        log.debug("Forbidden", user=user.name, verb=verb, subresources=",".join(needed))
        raise Denied(403, f"Forbidden (user={user.name}, verb={verb}, resource=nodes, "
                          f"subresource(s)=[{' '.join(needed)}])\n")

    async def _allowed(self, user: User, verb: str, subresource: str) -> bool:
        key = access_key(user, verb, subresource)
        cached = self._decisions.get(key)
        if cached is not None:
            return cached
        try:
            return await self.in_flight.run(("access", key), lambda: self._review_access(key, user, verb, subresource))
        except TooManyReviews:
            raise too_many_requests() from None

    async def _review_access(self, key: tuple[Any, ...], user: User, verb: str, subresource: str) -> bool:
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                "spec": {"user": user.name, "groups": list(user.groups), "uid": user.uid, "extra": user.extra,
                         "resourceAttributes": {"verb": verb, "resource": "nodes", "subresource": subresource,
                                                "name": self.node_name, "version": "v1", "group": ""}}}
        try:
            if self.review is None:
                raise RuntimeError("no apiserver to ask (standalone node)")
            answer = await self.review("/apis/authorization.k8s.io/v1/subjectaccessreviews", body)
        except Exception as e:
            log.warning("Authorization error", user=user.name, verb=verb, subresource=subresource, err=str(e))
            raise Denied(500, f"Authorization error (user={user.name}, verb={verb}, resource=nodes, "
                              f"subresource={subresource})") from None
        allowed = bool((answer.get("status") or {}).get("allowed"))
        self._decisions.put(key, allowed, self.settings.cache_authorized_ttl if allowed
                            else self.settings.cache_unauthorized_ttl)
        return allowed


class Gate:
    """Authentication then authorization, the one check every request passes."""

    def __init__(self, authn: Authenticator, authz: Authorizer):
        self.authn, self.authz = authn, authz

    async def check(self, method: str, path: str, headers: Mapping[str, str],
                    peercert: Mapping[str, Any] | None) -> User:
        user = await self.authn.authenticate(headers, peercert)
        await self.authz.authorize(user, method, path)
        return user
