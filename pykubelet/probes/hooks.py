"""Lifecycle hooks (postStart, preStop), run as the kubelet's handler runner runs them:
exec through CRI ExecSync, httpGet with the probes' HTTP request, sleep.

A hook fails on a non-zero exit, an HTTP request that gets no answer (any status code is an
answer), or a deadline. run_hook returns "" on success, else the message the kubelet logs and
puts in the FailedPreStopHook event / the PostStartHookError waiting state.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

from pykubelet.cri import errors
from pykubelet.runtime.service import Runtime
from pykubelet.probes.check import KUBE_VERSION, http_get


def _go_list(command: list[str]) -> str:
    return "[" + " ".join(command) + "]"  # how Go's %v prints a []string


async def run_hook(cri: Runtime, handler: dict[str, Any], container: dict[str, Any], container_id: str,
                   pod_ip: str, pod_desc: str, timeout: float) -> str:
    """Run one hook handler within `timeout` seconds; "" on success, else why it failed.

    `pod_desc` is the pod as the kubelet names it in messages: name_namespace(uid).
    """
    name = container.get("name", "")
    if handler.get("exec") is not None:
        command = list((handler["exec"] or {}).get("command") or [])
        output = b""
        try:
            answer = await cri.exec_sync(container_id, command, max(1, int(timeout)))
            output = answer.stdout + answer.stderr
            error = (f"command '{' '.join(command)}' exited with {answer.exit_code}: "
                     f"{answer.stderr.decode(errors='replace')}" if answer.exit_code else "")
        except errors.DeadlineExceeded:
            error = f"command '{' '.join(command)}' timed out after {timeout:g}s"
        except errors.CRIError as e:
            error = e.details
        if not error:
            return ""
        return (f"Exec lifecycle hook ({_go_list(command)}) for Container {json.dumps(name)} in Pod "
                f"{json.dumps(pod_desc)} failed - error: {error}, message: {json.dumps(output.decode(errors='replace'))}")
    if handler.get("httpGet") is not None:
        http = handler["httpGet"] or {}
        try:
            await http_get(http, container, pod_ip, timeout, f"kube-lifecycle/{KUBE_VERSION}")
            return ""
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError, ValueError) as e:
            error = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        return (f"HTTP lifecycle hook ({http.get('path') or ''}) for Container {json.dumps(name)} in Pod "
                f"{json.dumps(pod_desc)} failed - error: {error}")
    if handler.get("sleep") is not None:
        seconds = float((handler["sleep"] or {}).get("seconds") or 0)
        await asyncio.sleep(min(seconds, timeout))
        return ""
    # tcpSocket is accepted by the API for old manifests but was never run as a hook.
    return f"Cannot run handler: invalid handler: {json.dumps(handler)}"
