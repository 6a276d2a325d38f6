"""Lifecycle hooks (postStart, preStop), run as the kubelet's handler runner runs them:
exec through CRI ExecSync, httpGet with the probes' HTTP request, sleep.

A hook fails on a non-zero exit, an HTTP request that gets no answer (any status code is an
answer), or a deadline. run_hook returns "" on success, else the message the kubelet logs and
puts in the FailedPreStopHook event / the PostStartHookError waiting state.
"""

from __future__ import annotations

import asyncio
import json
from typing import Sequence

from aiohttp.client_exceptions import ClientError

from pykubelet.api.pod import ContainerPort
from pykubelet.api.probe import ExecAction, HTTPGetAction, LifecycleHandler, SleepAction
from pykubelet.cri import errors
from pykubelet.runtime.service import Runtime
from pykubelet.probes.check import KUBE_VERSION, http_get


def _go_list(command: list[str]) -> str:
    return "[" + " ".join(command) + "]"  # how Go's %v prints a []string


async def run_hook(cri: Runtime, handler: LifecycleHandler, container_name: str, ports: Sequence[ContainerPort],
                   container_id: str, pod_ip: str, pod_desc: str, timeout: float) -> str:
    """Run one hook handler within `timeout` seconds; "" on success, else why it failed.

    `ports` are the container's (an httpGet hook may name one); `pod_desc` is the pod as the
    kubelet names it in messages: name_namespace(uid).
    """
    name, action = container_name, handler.action
    if isinstance(action, ExecAction):
        command = list(action.command)
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
    if isinstance(action, HTTPGetAction):
        try:
            await http_get(action, ports, pod_ip, timeout, f"kube-lifecycle/{KUBE_VERSION}")
            return ""
        except (ClientError, OSError, asyncio.TimeoutError, ValueError) as e:
            error = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        return (f"HTTP lifecycle hook ({action.path}) for Container {json.dumps(name)} in Pod "
                f"{json.dumps(pod_desc)} failed - error: {error}")
    if isinstance(action, SleepAction):
        await asyncio.sleep(min(float(action.seconds), timeout))
        return ""
    # tcpSocket is accepted by the API for old manifests but was never run as a hook.
    return f"Cannot run handler: invalid handler: {json.dumps(handler.to_dict())}"
