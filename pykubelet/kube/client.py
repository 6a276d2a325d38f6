"""A thin JSON client for the apiserver: plain dicts in and out, nothing deserialized twice.

kubernetes_asyncio does what a library should here — kubeconfig loading, TLS, credential
plugins and token refresh — and we ask it for raw responses (`_preload_content=False`), so
watch streams and large lists are parsed once, into the dicts the agent already works with.
Every call waits its turn in a kubeAPIQPS/kubeAPIBurst token bucket and has a timeout.
"""

from __future__ import annotations

import json
from typing import Any, AsyncIterator

import aiohttp
from aiolimiter import AsyncLimiter
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config import load_kube_config

from pykubelet.kube import errors
from pykubelet.util import metrics

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
DEFAULT_TIMEOUT = 30.0


class KubeClient:
    def __init__(self, api: ApiClient, qps: float, burst: int, user_agent: str):
        self._api = api
        self._api.user_agent = user_agent
        self._limiter = AsyncLimiter(max_rate=burst, time_period=burst / qps)
        self.host = api.configuration.host

    @classmethod
    async def from_kubeconfig(cls, path: str, qps: float = 50, burst: int = 100,
                              user_agent: str = "pykubelet") -> "KubeClient":
        configuration = Configuration()
        await load_kube_config(config_file=path, client_configuration=configuration)
        return cls(ApiClient(configuration), qps, burst, user_agent)

    async def close(self) -> None:
        await self._api.close()

    async def _send(self, method: str, path: str, query: dict[str, Any] | None, body: Any,
                    content_type: str, timeout: float | aiohttp.ClientTimeout) -> aiohttp.ClientResponse:
        async with self._limiter:
            pass  # one token per request; streaming reads do not hold it
        try:
            return await self._api.call_api(
                path, method, query_params=list((query or {}).items()),
                header_params={"Accept": JSON, "Content-Type": content_type}, body=body,
                auth_settings=["BearerToken"], _preload_content=False, _request_timeout=timeout)
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            raise errors.Unreachable(method, path, 0, type(e).__name__, str(e) or repr(e)) from None
        except ApiException as e:
            raise errors.KubeError(method, path, e.status or 0, e.reason or "", str(e.body)[:500]) from None

    async def request(self, method: str, path: str, *, query: dict[str, Any] | None = None, body: Any = None,
                      content_type: str = JSON, timeout: float = DEFAULT_TIMEOUT) -> Any:
        response = await self._send(method, path, query, body, content_type, timeout)
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
        response = await self._send("GET", path, query, None, JSON, timeout)
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
