"""One probe attempt, as the kubelet's prober runs it: exec (CRI ExecSync), httpGet, tcpSocket, grpc.

Returns (success, message); the message is what an Unhealthy event says (or, for a success,
what a ProbeWarning event says: "" for none). The HTTP request and
the port lookup are shared with the lifecycle hooks (probes/hooks.py).
"""

from __future__ import annotations

import asyncio
import json
from typing import Sequence
from urllib.parse import urljoin, urlsplit

import grpc
from aiohttp.client_exceptions import ClientError

from pykubelet import KUBE_MINOR_VERSION
from pykubelet.api.pod import ContainerPort
from pykubelet.api.probe import ExecAction, GRPCAction, HTTPGetAction, Port, Probe, TCPSocketAction
from pykubelet.cri import errors
from pykubelet.runtime.service import Runtime
from pykubelet.probes.grpc_health.v1 import health_pb2, health_pb2_grpc
from pykubelet.util import http_client
from pykubelet.util.timeouts import within

MAX_BODY = 10 * 1024  # the kubelet reads at most 10 KiB of a probe's answer
MAX_REDIRECTS = 10  # Go's http.Client default, which the kubelet keeps
REDIRECTS = (301, 302, 303, 307, 308)
KUBE_VERSION = KUBE_MINOR_VERSION


def resolve_port(value: Port, ports: Sequence[ContainerPort]) -> int:
    """A number, or the name of one of the container's ports."""
    if isinstance(value, int):
        return value
    for port in ports:
        if port.name == value:
            return port.container_port
    raise ValueError(f"unknown port {value!r}")


async def http_get(http: HTTPGetAction, ports: Sequence[ContainerPort], pod_ip: str, timeout: float,
                   user_agent: str) -> tuple[int, str]:
    """GET an httpGet action's URL (host defaults to the pod IP); (status code, start of the body).

    Redirects are followed on the same host only, at most MAX_REDIRECTS times: a redirect to
    another host ends the request with that 3xx answer (the kubelet's prober does not go where a
    container points it)."""
    path = http.path if http.path.startswith("/") else "/" + http.path
    url = f"{http.scheme.lower()}://{http.host or pod_ip}:{resolve_port(http.port, ports)}{path}"
    host = urlsplit(url).hostname
    headers = {"User-Agent": user_agent, "Accept": "*/*"}
    headers.update({h.name: h.value for h in http.headers})
    client = await http_client.client()
    async with client.ClientSession(timeout=client.ClientTimeout(total=timeout)) as session:
        for _ in range(MAX_REDIRECTS + 1):
            async with session.get(url, headers=headers, ssl=False, allow_redirects=False) as response:
                body = (await response.content.read(MAX_BODY)).decode(errors="replace")
                location = response.headers.get("Location")
                if response.status not in REDIRECTS or not location:
                    return response.status, body
                target = urljoin(url, location)
                if urlsplit(target).hostname != host:
                    return response.status, body
                url = target
    raise TooManyRedirects(f"stopped after {MAX_REDIRECTS} redirects")


class TooManyRedirects(ClientError):
    """A probe's or hook's URL that keeps redirecting on its own host."""


async def grpc_check(host: str, port: int, service: str, timeout: float) -> tuple[bool, str]:
    """grpc.health.v1.Health/Check against host:port, with the kubelet's messages."""
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    async with grpc.aio.insecure_channel(address, options=[("grpc.primary_user_agent",
                                                            f"kube-probe/{KUBE_VERSION}")]) as channel:
        try:
            await within(channel.channel_ready(), timeout)
        except asyncio.TimeoutError:
            return False, f"timeout: failed to connect service {json.dumps(address)} within {timeout:g}s"
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            answer = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        except grpc.aio.AioRpcError as e:
            if e.code() == grpc.StatusCode.UNIMPLEMENTED:
                return False, ("this server does not implement the grpc health protocol (grpc.health.v1.Health): "
                               f"{e.details()}")
            if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                return False, f"timeout: health rpc did not complete within {timeout:g}s"
            code = "".join(word.capitalize() for word in e.code().name.split("_"))  # Go's codes.Code names
            return False, f"error: health rpc probe failed: rpc error: code = {code} desc = {e.details()}"
    if answer.status != health_pb2.HealthCheckResponse.SERVING:
        status = health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status)
        return False, f"service unhealthy (responded with {json.dumps(status)})"
    return True, ""


async def run_probe(cri: Runtime, probe: Probe, ports: Sequence[ContainerPort], container_id: str,
                    pod_ip: str) -> tuple[bool, str]:
    timeout = float(probe.timeout_seconds)
    action = probe.action
    try:
        if isinstance(action, ExecAction):
            command = list(action.command)
            try:
                answer = await cri.exec_sync(container_id, command, probe.timeout_seconds)
            except errors.DeadlineExceeded:
                return False, f"command timed out after {timeout:g}s"
            if answer.exit_code == 0:
                return True, ""
            output = (answer.stdout + answer.stderr).decode(errors="replace").strip()
            return False, output or f"command {command} exited with {answer.exit_code}"
        if isinstance(action, HTTPGetAction):
            status, body = await http_get(action, ports, pod_ip, timeout, f"kube-probe/{KUBE_VERSION}")
            if 300 <= status < 400:  # a redirect elsewhere: success, with a warning (the kubelet's)
                return True, f"Probe terminated redirects, Response body: {body}"
            if 200 <= status < 300:
                return True, ""
            return False, f"HTTP probe failed with statuscode: {status} {body[:200]}".rstrip()
        if isinstance(action, TCPSocketAction):
            port = resolve_port(action.port, ports)
            _, writer = await within(asyncio.open_connection(action.host or pod_ip, port), timeout)
            writer.close()
            return True, ""
        assert isinstance(action, GRPCAction)
        return await grpc_check(pod_ip, action.port, action.service, timeout)
    except (ClientError, OSError, asyncio.TimeoutError, ValueError) as e:
        return False, f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    except errors.CRIError as e:
        return False, e.details
