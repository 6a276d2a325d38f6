"""GET /containerLogs/{namespace}/{pod}/{container}: a container's log, as `kubectl logs` asks for it.

Which instance is read follows the kubelet: with `previous`, the last terminated one; else the
running one, else the terminated one; a container still waiting has no log yet (400 with the
kubelet's words). With `follow` the answer streams until the container stops; a rotated file
(renamed, then reopened by the runtime) is followed into the new one.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiohttp import web

from pykubelet.cri import errors
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.server import logs
from pykubelet.server.host import Host, container_id, container_status, spec_container_names
from pykubelet.util.log import get_logger

log = get_logger(__name__)

FOLLOW_POLL_SECONDS = 0.2
RUNNING_CHECK_SECONDS = 1.0  # how often a follower asks the runtime whether the container still runs


class LogError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def choose_container(pod_name: str, status: dict[str, Any], name: str, previous: bool) -> str:
    """The runtime ID of the instance to read, or LogError(400) saying why there is none."""
    cs = container_status(status, name)
    if cs is None:
        raise LogError(400, f'container "{name}" in pod "{pod_name}" is not available')
    state, last = cs.get("state") or {}, (cs.get("lastState") or {}).get("terminated")
    terminated = state.get("terminated")
    if previous:
        if not last or not last.get("containerID"):
            raise LogError(400, f'previous terminated container "{name}" in pod "{pod_name}" not found')
        return container_id(last["containerID"])
    if "running" in state:
        return container_id(cs.get("containerID", ""))
    if terminated is not None:
        cid = terminated.get("containerID") or (last or {}).get("containerID")
        if not cid:
            raise LogError(400, f'container "{name}" in pod "{pod_name}" is terminated')
        return container_id(cid)
    if last is not None:
        if not last.get("containerID"):
            raise LogError(400, f'container "{name}" in pod "{pod_name}" is terminated')
        return container_id(last["containerID"])
    waiting = state.get("waiting")
    if waiting is not None:
        reason = waiting.get("reason", "")
        detail = {"ErrImagePull": "image can't be pulled",
                  "ImagePullBackOff": "trying and failing to pull image"}.get(reason, reason)
        raise LogError(400, f'container "{name}" in pod "{pod_name}" is waiting to start: {detail}')
    raise LogError(400, f'container "{name}" in pod "{pod_name}" is waiting to start - no logs yet')


async def _log_path(host: Host, cid: str) -> str:
    try:
        return (await host.cri.container_status(cid)).status.log_path
    except errors.NotFound:
        raise LogError(400, f'failed to get container status {cid}: container "{cid}" not found') from None


async def _still_running(host: Host, cid: str) -> bool:
    try:
        state = (await host.cri.container_status(cid)).status.state
    except errors.Unavailable:
        return True  # the runtime restarting is not the container stopping
    except errors.CRIError:
        return False
    return state == api.CONTAINER_RUNNING


async def handle(host: Host, request: web.Request) -> web.StreamResponse:
    namespace, pod_name, name = (request.match_info[k] for k in ("namespace", "pod", "container"))
    try:
        options = logs.parse_options(dict(request.query), logs.now_utc())
    except logs.InvalidLogOptions as e:
        return web.Response(status=e.status, text=e.body)
    found = host.find_pod(namespace, pod_name)
    if found is None:
        return web.Response(status=404, text=f'pod "{pod_name}" does not exist')
    pod, status = found
    if name not in spec_container_names(pod):
        return web.Response(status=404, text=f'container "{name}" not found in pod "{pod_name}"')
    try:
        cid = choose_container(pod.name, status, name, options.previous)
        path = await _log_path(host, cid)
        reader = await asyncio.to_thread(logs.LogReader, path, options)
    except LogError as e:
        return web.Response(status=e.status, text=e.message)
    except OSError as e:
        return web.Response(status=400, text=f'failed to open log file "{e.filename}": {e.strerror}')
    response = web.StreamResponse(headers={"Content-Type": "text/plain"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    try:
        await _stream(host, reader, cid, options.follow, response)
    except (ConnectionResetError, asyncio.CancelledError):
        raise
    finally:
        reader.close()
    await response.write_eof()
    return response


async def _stream(host: Host, reader: logs.LogReader, cid: str, follow: bool, response: web.StreamResponse) -> None:
    checked_at, running = 0.0, True
    while not reader.done:
        data, at_end = await asyncio.to_thread(reader.read)
        if data:
            await response.write(data)  # one chunk per read: a follower sees each line as it comes
        if not at_end:
            continue
        if not follow:
            return
        if await asyncio.to_thread(reader.follow_rotation):
            continue  # the rest of the old file, then the new one
        if not running:
            return  # it had stopped at the last check, and everything it wrote has been read
        if time.monotonic() - checked_at >= RUNNING_CHECK_SECONDS:
            running, checked_at = await _still_running(host, cid), time.monotonic()
            if not running:
                continue  # read once more: the last lines may have landed since
        await asyncio.sleep(FOLLOW_POLL_SECONDS)

