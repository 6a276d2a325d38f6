"""The agent's end of the CNI shim: a unix socket where cni/pykubelet-cni hands over each call.

One JSON line in ({"command", "env": CNI_* variables, "config": the shim's network config}),
one JSON line out ({"result": ...} or {"error": {"code", "msg", "details"}}), as the shim
prints it for containerd.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any, Awaitable, Callable

from pykubelet.cni.client import Attachment
from pykubelet.cni.errors import CNIError
from pykubelet.util.log import get_logger

log = get_logger(__name__)

MAX_REQUEST_BYTES = 1 << 20
INVALID_ENVIRONMENT = 4  # CNI spec error codes
INVALID_NETWORK_CONFIG = 7
INTERNAL_ERROR = 999

Handler = Callable[[str, Attachment], Awaitable["dict[str, Any] | None"]]


class BadRequest(ValueError):
    def __init__(self, code: int, msg: str):
        super().__init__(msg)
        self.code = code


def parse_cni_args(text: str) -> tuple[tuple[str, str], ...]:
    """CNI_ARGS "K1=V1;K2=V2" as pairs (IgnoreUnknown and friends included)."""
    pairs = []
    for item in filter(None, text.split(";")):
        key, sep, value = item.partition("=")
        if not sep:
            raise BadRequest(INVALID_ENVIRONMENT, f"CNI_ARGS item {item!r} is not KEY=VALUE")
        pairs.append((key, value))
    return tuple(pairs)


def parse_request(request: Any) -> tuple[str, Attachment]:
    if not isinstance(request, dict) or not isinstance(request.get("env"), dict):
        raise BadRequest(INVALID_ENVIRONMENT, "request has no CNI environment")
    env, config = request["env"], request.get("config") or {}
    if not isinstance(config, dict):
        raise BadRequest(INVALID_NETWORK_CONFIG, "network config is not an object")
    command = request.get("command") or env.get("CNI_COMMAND", "")
    if command not in ("ADD", "DEL", "CHECK"):
        raise BadRequest(INVALID_ENVIRONMENT, f"CNI_COMMAND {command!r} is not supported by pykubelet-cni")
    container_id = env.get("CNI_CONTAINERID", "")
    if not container_id:
        raise BadRequest(INVALID_ENVIRONMENT, "CNI_CONTAINERID is required")
    netns = env.get("CNI_NETNS", "")
    if command != "DEL" and not netns:
        raise BadRequest(INVALID_ENVIRONMENT, f"CNI_NETNS is required for {command}")
    runtime_config = config.get("runtimeConfig") or {}
    return command, Attachment(container_id=container_id, netns=netns, ifname=env.get("CNI_IFNAME") or "eth0",
                               args=parse_cni_args(env.get("CNI_ARGS", "")),
                               capability_args=runtime_config if isinstance(runtime_config, dict) else {})


class ShimServer:
    def __init__(self, path: str, handle: Handler):
        self.path = path
        self.handle = handle
        self.ready = asyncio.Event()

    async def _answer(self, line: bytes) -> dict[str, Any]:
        try:
            command, attachment = parse_request(json.loads(line))
        except (ValueError, BadRequest) as e:
            code = e.code if isinstance(e, BadRequest) else INVALID_NETWORK_CONFIG
            return {"error": {"code": code, "msg": str(e), "details": ""}}
        try:
            return {"result": await self.handle(command, attachment)}
        except CNIError as e:
            return {"error": {"code": e.code, "msg": e.msg, "details": e.details}}
        except Exception as e:  # noqa: BLE001 - the shim must get an answer, whatever broke
            log.error("CNI request failed", exc_info=True, command=command, container=attachment.container_id)
            return {"error": {"code": INTERNAL_ERROR, "msg": f"pykubelet: {command} failed: {e}", "details": ""}}

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await reader.readline()
            answer = await self._answer(line)
            writer.write(json.dumps(answer).encode() + b"\n")
            await writer.drain()
        except (ConnectionError, asyncio.LimitOverrunError, ValueError) as e:
            log.warning("CNI shim connection failed", err=str(e))
        finally:
            writer.close()

    async def start(self) -> asyncio.AbstractServer:
        """Listen on the socket (raises if it cannot); answering goes on until the server closes."""
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        if os.path.exists(self.path):
            os.unlink(self.path)  # a stale socket of an earlier agent
        server = await asyncio.start_unix_server(self._serve_one, self.path, limit=MAX_REQUEST_BYTES)
        os.chmod(self.path, 0o600)
        log.info("Answering the CNI shim", socket=self.path)
        self.ready.set()
        return server

    async def run(self) -> None:
        async with await self.start() as server:
            await server.serve_forever()
