"""One probe attempt, as the kubelet's prober runs it: exec (CRI ExecSync), httpGet, tcpSocket.

Returns (success, message); the message is what an Unhealthy event says.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from pykubelet.cri import errors
from pykubelet.cri.client import CRIClient

MAX_BODY = 10 * 1024  # the kubelet reads at most 10 KiB of a probe's answer


def _port(value: Any, container: dict[str, Any]) -> int:
    """A number, or the name of one of the container's ports."""
    if isinstance(value, int):
        return value
    for port in container.get("ports") or []:
        if port.get("name") == value:
            return int(port["containerPort"])
    if isinstance(value, str) and value.isdigit():
        return int(value)
    raise ValueError(f"unknown port {value!r}")


async def run_probe(cri: CRIClient, probe: dict[str, Any], container: dict[str, Any], container_id: str,
                    pod_ip: str) -> tuple[bool, str]:
    timeout = float(probe.get("timeoutSeconds") or 1)
    try:
        if "exec" in probe:
            command = list((probe["exec"] or {}).get("command") or [])
            try:
                answer = await cri.exec_sync(container_id, command, int(timeout))
            except errors.DeadlineExceeded:
                return False, f"command timed out after {timeout:g}s"
            if answer.exit_code == 0:
                return True, ""
            output = (answer.stdout + answer.stderr).decode(errors="replace").strip()
            return False, output or f"command {command} exited with {answer.exit_code}"
        if "httpGet" in probe:
            http = probe["httpGet"] or {}
            scheme = (http.get("scheme") or "HTTP").lower()
            url = f"{scheme}://{http.get('host') or pod_ip}:{_port(http.get('port'), container)}{http.get('path') or '/'}"
            headers = {"User-Agent": "kube-probe/1.36", "Accept": "*/*"}
            headers.update({h["name"]: h["value"] for h in http.get("httpHeaders") or []})
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
                async with session.get(url, headers=headers, ssl=False, allow_redirects=True) as response:
                    body = (await response.content.read(MAX_BODY)).decode(errors="replace")
                    if 200 <= response.status < 400:
                        return True, ""
                    return False, f"HTTP probe failed with statuscode: {response.status} {body[:200]}".rstrip()
        if "tcpSocket" in probe:
            tcp = probe["tcpSocket"] or {}
            port = _port(tcp.get("port"), container)
            _, writer = await asyncio.wait_for(asyncio.open_connection(tcp.get("host") or pod_ip, port), timeout)
            writer.close()
            return True, ""
        return True, ""  # grpc and unknown handlers: not run yet (counted as success, logged once upstream)
    except (aiohttp.ClientError, OSError, asyncio.TimeoutError, ValueError) as e:
        return False, f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    except errors.CRIError as e:
        return False, e.details
