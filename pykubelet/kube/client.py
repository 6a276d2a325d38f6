"""A thin JSON client for the apiserver: plain dicts in and out, nothing deserialized twice.

kubernetes_asyncio does what a library should here — kubeconfig loading, TLS, credential
plugins and token refresh — and we ask it for raw responses (`_preload_content=False`), so
watch streams and large lists are parsed once, into the dicts the agent already works with.
Every call waits its turn in a kubeAPIQPS/kubeAPIBurst token bucket and has a timeout, except on
the heartbeat client (heartbeat_client): the node's Lease and status go through their own
connection pool with no client-side rate limit, as the kubelet's HeartbeatClient does, so no other
traffic of the agent, nor any review a client of the kubelet API causes, can delay a renewal.

Client certificates rotate under a running agent (kube/rotation.py): `reload_credentials` builds a
new connection pool from the new certificate for every call from then on, and closes the old pool
only when the last request or watch that uses it ends, so no watch is cut short by a rotation.
"""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Any, AsyncIterator

import aiohttp

from pykubelet.kube import errors
from pykubelet.kube.rest_layer import ApiClient, ApiException, Configuration, load_kube_config
from pykubelet.util import metrics
from pykubelet.util.deferred_init import init_on_first_miss, package_unrun

# aiolimiter's package __init__ only reads its own version from the installed metadata, which
# costs importlib.metadata (~0.7 MB, a dozen modules) and a read of the disk: its limiter is imported alone.
if "aiolimiter" not in sys.modules:
    init_on_first_miss(package_unrun("aiolimiter"))
from aiolimiter.leakybucket import AsyncLimiter  # noqa: E402 (after the registration above)

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
DEFAULT_TIMEOUT = 30.0


async def _api_client(kubeconfig: str, client_pem: str, user_agent: str) -> ApiClient:
    configuration = Configuration()
    await load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    if client_pem:  # the cert store's current pair wins over what the kubeconfig names or embeds
        configuration.cert_file = configuration.key_file = client_pem
    api = ApiClient(configuration)
    api.user_agent = user_agent
    return api


class KubeClient:
    def __init__(self, api: ApiClient, qps: float, burst: int, user_agent: str,
                 reload: tuple[str, str] | None = None, timeout: float = DEFAULT_TIMEOUT):
        """qps <= 0: no client-side rate limit."""
        self._api = api
        self._api.user_agent = user_agent
        self._user_agent = user_agent
        self._limiter = AsyncLimiter(max_rate=burst, time_period=burst / qps) if qps > 0 else None
        self._timeout = timeout
        self._linked: list[KubeClient] = []  # clients of the same credentials, reloaded with this one
        self.host = api.configuration.host
        self._reload = reload  # (kubeconfig, client PEM) to build the next pool from
        self._users: dict[ApiClient, int] = {api: 0}  # requests and watches in flight, per pool
        self._retired: set[ApiClient] = set()

    @classmethod
    async def from_kubeconfig(cls, path: str, qps: float = 50, burst: int = 100,
                              user_agent: str = "pykubelet", client_pem: str = "") -> "KubeClient":
        """client_pem: a PEM with the client certificate and key to use instead of the kubeconfig's
        (the cert store's kubelet-client-current.pem, which rotation replaces)."""
        return cls(await _api_client(path, client_pem, user_agent), qps, burst, user_agent, (path, client_pem))

    async def heartbeat_client(self, timeout: float) -> "KubeClient":
        """A client of the same credentials with its own connection pool and no rate limit, for the
        Lease and node status; its requests time out after `timeout`. Reloaded with this one."""
        assert self._reload is not None, "a client made from an ApiClient cannot make another"
        client = KubeClient(await _api_client(*self._reload, self._user_agent), 0, 0, self._user_agent,
                            self._reload, timeout)
        self._linked.append(client)
        return client

    async def reload_credentials(self) -> None:
        """Use the kubeconfig's (or the cert store's) current credentials from now on."""
        assert self._reload is not None, "a client made from an ApiClient cannot reload"
        new = await _api_client(*self._reload, self._user_agent)
        old, self._api = self._api, new
        self._users[new] = 0
        self._retired.add(old)
        await self._close_if_unused(old)
        for linked in self._linked:
            await linked.reload_credentials()

    async def _close_if_unused(self, api: ApiClient) -> None:
        if api in self._retired and not self._users.get(api):
            self._retired.discard(api)
            self._users.pop(api, None)
            await api.close()

    @contextlib.asynccontextmanager
    async def _pool(self) -> AsyncIterator[ApiClient]:
        """The current pool, held for the whole request or watch."""
        api = self._api
        self._users[api] += 1
        try:
            yield api
        finally:
            self._users[api] -= 1
            await self._close_if_unused(api)

    async def close(self) -> None:
        for linked in self._linked:
            await linked.close()
        for api in list(self._users):
            await api.close()
        self._users.clear()
        self._retired.clear()

    async def _send(self, api: ApiClient, method: str, path: str, query: dict[str, Any] | None, body: Any,
                    content_type: str, timeout: float | aiohttp.ClientTimeout) -> aiohttp.ClientResponse:
        if self._limiter is not None:
            async with self._limiter:
                pass  # one token per request; streaming reads do not hold it
        try:
            return await api.call_api(
                path, method, query_params=list((query or {}).items()),
                header_params={"Accept": JSON, "Content-Type": content_type}, body=body,
                auth_settings=["BearerToken"], _preload_content=False, _request_timeout=timeout)
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            raise errors.Unreachable(method, path, 0, type(e).__name__, str(e) or repr(e)) from None
        except ApiException as e:
            raise errors.KubeError(method, path, e.status or 0, e.reason or "", str(e.body)[:500]) from None

    async def request(self, method: str, path: str, *, query: dict[str, Any] | None = None, body: Any = None,
                      content_type: str = JSON, timeout: float | None = None) -> Any:
        async with self._pool() as api:
            response = await self._send(api, method, path, query, body, content_type, timeout or self._timeout)
            try:
                data = await response.read()
            except (aiohttp.ClientError, TimeoutError) as e:
                raise errors.Unreachable(method, path, 0, type(e).__name__, str(e)) from None
            finally:
                response.release()
        decoded = json.loads(data) if data else None
        metrics.REST_CLIENT_REQUESTS.labels(str(response.status), method, self.host.split("://")[-1]).inc()
        if not 200 <= response.status < 300:
            raise errors.from_status(method, path, response.status, decoded)
        return decoded

    async def get(self, path: str, **query: Any) -> Any:
        return await self.request("GET", path, query=query or None)

    async def create(self, path: str, body: dict[str, Any]) -> Any:
        return await self.request("POST", path, body=body)

    async def replace(self, path: str, body: dict[str, Any]) -> Any:
        return await self.request("PUT", path, body=body)

    async def patch(self, path: str, body: dict[str, Any], content_type: str = MERGE_PATCH) -> Any:
        return await self.request("PATCH", path, body=body, content_type=content_type)

    async def delete(self, path: str, body: dict[str, Any] | None = None) -> Any:
        return await self.request("DELETE", path, body=body)

    async def watch(self, path: str, query: dict[str, Any], timeout_seconds: int) -> AsyncIterator[dict[str, Any]]:
        """Watch events ({"type", "object"}) until the server ends the stream after timeout_seconds."""
        query = {**query, "watch": "true", "timeoutSeconds": timeout_seconds, "allowWatchBookmarks": "true"}
        timeout = aiohttp.ClientTimeout(total=timeout_seconds + 30, sock_connect=DEFAULT_TIMEOUT)
        async with self._pool() as api, contextlib.aclosing(self._stream(api, path, query, timeout)) as events:
            async for event in events:
                yield event

    async def _stream(self, api: ApiClient, path: str, query: dict[str, Any],
                      timeout: aiohttp.ClientTimeout) -> AsyncIterator[dict[str, Any]]:
        response = await self._send(api, "GET", path, query, None, JSON, timeout)
        try:
            if response.status != 200:
                body = await response.read()
                raise errors.from_status("WATCH", path, response.status, json.loads(body) if body else None)
            # One JSON object per line; lines can outgrow aiohttp's readline limit, so split ourselves.
            pending = b""
            async for chunk in response.content.iter_any():
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield json.loads(line)
        except (aiohttp.ClientError, TimeoutError) as e:
            raise errors.Unreachable("WATCH", path, 0, type(e).__name__, str(e)) from None
        finally:
            response.release()
