"""Service account tokens for projected volumes, through the TokenRequest API, as the
kubelet's token manager gets them: bound to the pod, cached, and fetched again once 80% of
their lifetime has passed or they are older than 24 hours (each with up to 10 s of jitter).
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable

from pykubelet.kube import errors
from pykubelet.util.log import get_logger

if TYPE_CHECKING:  # the client costs ~40 MB: imported only when joining a cluster
    from pykubelet.kube.client import KubeClient

log = get_logger(__name__)

MAX_TTL_SECONDS = 24 * 3600
MAX_JITTER_SECONDS = 10.0
DEFAULT_EXPIRATION_SECONDS = 3600  # what the API defaults a projected token's expirationSeconds to
FORBIDDEN_RETRY_SECONDS, FORBIDDEN_RETRY_MAX_SECONDS = 0.1, 1.0


@dataclass(frozen=True)
class Token:
    token: str
    expires_at: float
    """Unix time, from status.expirationTimestamp."""
    expiration_seconds: int
    """The lifetime asked for (spec.expirationSeconds of the answer)."""


def requires_refresh(token: Token, now: float, jitter: float = 0.0) -> bool:
    """The kubelet's rule: older than 24 h, or within 20% of its lifetime of expiring."""
    issued_at = token.expires_at - token.expiration_seconds
    if now > issued_at + MAX_TTL_SECONDS - jitter:
        return True
    return now > token.expires_at - token.expiration_seconds * 20 // 100 - jitter


def parse_time(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _parse(answer: Any, expiration_seconds: int, path: str) -> Token:
    try:
        return Token(answer["status"]["token"], parse_time(answer["status"]["expirationTimestamp"]),
                     int((answer.get("spec") or {}).get("expirationSeconds") or expiration_seconds))
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise errors.KubeError("POST", path, 0, "BadResponse", f"unexpected TokenRequest answer: {e!r}") from None


class TokenManager:
    def __init__(self, kube: KubeClient, clock: Callable[[], float] = time.time):
        self.kube = kube
        self.clock = clock
        self._cache: dict[tuple[str, ...], Token] = {}

    async def get(self, namespace: str, service_account: str, pod_name: str, pod_uid: str,
                  audience: str = "", expiration_seconds: int = DEFAULT_EXPIRATION_SECONDS) -> str:
        """A token for the pod's service account; a cached one while it is fresh enough.

        A failed refresh keeps serving the cached token until it expires, as the kubelet does.
        """
        return (await self.token(namespace, service_account, pod_name, pod_uid, audience, expiration_seconds)).token

    async def token(self, namespace: str, service_account: str, pod_name: str, pod_uid: str,
                    audience: str = "", expiration_seconds: int = DEFAULT_EXPIRATION_SECONDS) -> Token:
        """As get(), with the token's expiry (what a CSI driver is told with it)."""
        key = (namespace, service_account, audience, str(expiration_seconds), pod_uid)
        cached = self._cache.get(key)
        now = self.clock()
        if cached and not requires_refresh(cached, now, random.random() * MAX_JITTER_SECONDS):
            return cached
        body: dict[str, Any] = {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": expiration_seconds,
                     "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": pod_uid}},
        }
        if audience:
            body["spec"]["audiences"] = [audience]
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token"
        try:
            token = await self._request(path, body, expiration_seconds)
        except errors.KubeError as e:
            if cached and now < cached.expires_at:
                log.warning("Could not refresh a service account token; the current one is still valid",
                            pod=f"{namespace}/{pod_name}", serviceAccount=service_account, err=str(e))
                return cached
            raise
        self._cache[key] = token
        log.debug("Got a service account token", pod=f"{namespace}/{pod_name}", serviceAccount=service_account,
                  expiresIn=round(token.expires_at - now))
        return token

    async def _request(self, path: str, body: dict[str, Any], expiration_seconds: int) -> Token:
        # Right after a pod is bound the Node authorizer may not know it yet (403): ask again shortly.
        delay = FORBIDDEN_RETRY_SECONDS
        while True:
            try:
                return _parse(await self.kube.create(path, body), expiration_seconds, path)
            except errors.KubeError as e:
                if e.status != 403 or delay > FORBIDDEN_RETRY_MAX_SECONDS:
                    raise
            await asyncio.sleep(delay)
            delay *= 2

    def forget(self, pod_uid: str) -> None:
        """Drop a removed pod's tokens."""
        self._cache = {k: v for k, v in self._cache.items() if k[-1] != pod_uid}
