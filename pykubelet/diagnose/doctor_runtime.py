"""The container runtime: its socket, CRI Version and Status (RuntimeReady), and containerd's own
view of the network it will give pods (NetworkReady, the CNI config it loaded, its plugin dir).

"container runtime is down" and "container runtime network not ready" are the kubelet's two
runtime causes of NotReady; both come from here.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket

from pykubelet.cri import errors
from pykubelet.cri.client import CRIClient
from pykubelet.diagnose.checks import FAIL, OK, WARN, Node
from pykubelet.util.timeouts import within

AREA = "Container runtime"
TIMEOUT = 5.0


def socket_path(endpoint: str) -> str:
    return endpoint.removeprefix("unix://") if endpoint.startswith("unix://") or "://" not in endpoint else ""


def answers(path: str) -> str:
    """"" when something accepts connections on the unix socket at path, else why not."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(2)
        try:
            s.connect(path)
            return ""
        except OSError as e:
            return e.strerror or str(e)


def _decoded(info: dict[str, str]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in info.items():
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


async def check(node: Node) -> None:
    endpoint = node.settings.runtime.endpoint
    more = f"pykubelet cri info -r {endpoint}"
    path = socket_path(endpoint)
    if path and not os.path.exists(path):
        node.add(AREA, FAIL, f"the container runtime is down: no socket at {path}", [
            "containerd is not running, or listens elsewhere (the agent's --container-runtime-endpoint)",
            "the node reports Ready=False: container runtime is down"], "pgrep -a containerd")
        return
    if path and (why := answers(path)):
        node.add(AREA, FAIL, f"the container runtime is down: {path} exists but {why.lower()}", [
            "a socket left behind by a containerd that stopped, or one starting up",
            "the node reports Ready=False: container runtime is down"], "pgrep -a containerd")
        return
    async with CRIClient(endpoint, timeout=TIMEOUT) as cri:
        try:
            version = await within(cri.version(), TIMEOUT)
            status = await within(cri.status(verbose=True), TIMEOUT)
        except (errors.CRIError, asyncio.TimeoutError) as e:
            node.add(AREA, FAIL, f"the container runtime does not answer CRI on {endpoint}: "
                                 f"{getattr(e, 'details', '') or type(e).__name__}",
                     ["the node reports Ready=False: container runtime is down"], more)
            return
    node.runtime_status, node.runtime_info = status, _decoded(dict(status.info))
    node.add(AREA, OK, f"{version.runtime_name} {version.runtime_version} answers CRI {version.runtime_api_version} "
                       f"on {endpoint}", more=more)
    for condition in status.status.conditions:
        if condition.type == "NetworkReady":
            continue  # the network's, below
        detail = f" ({condition.reason}: {condition.message})" if condition.reason or condition.message else ""
        if condition.status:
            node.add(AREA, OK, f"{condition.type}=true{detail}")
        elif condition.type == "RuntimeReady":
            node.add(AREA, FAIL, f"{condition.type}=false{detail}",
                     ["the node reports Ready=False: container runtime not ready"], more)
        else:  # the runtime's own news (containerd 2.x: ContainerdHasNoDeprecationWarnings); Ready stays
            node.add(AREA, WARN, f"{condition.type}=false{detail}", more=more)
