"""Clients without credentials against a joined node's kubelet API, as an attacker on the network
would: a flood of bogus bearer tokens gets 401 or 429 while the node's Lease keeps being renewed
on time (its renewTime read back through the apiserver), and 1,100 silent TCP connections leave
the agent serving authenticated requests and starting pods. Each prints its numbers (the Lease's
worst gap, the agent's CPU) for the record."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pathlib
import resource
import sys
import time
from datetime import datetime

import pytest

from pykubelet.kube.client import KubeClient
from tests.cluster.conftest import ADMIN, kubectl, node_condition, node_object, start_joined_agent
from tests.cluster.test_kubelet_api import api_answers, direct, pod, start
from tests.helpers import unmount_under, wait_for
from tests.runtime.conftest import NODE

REPO = pathlib.Path(__file__).resolve().parents[2]
RENEW_INTERVAL = 10.0  # the 40 s lease, renewed every quarter of it
RENEW_MARGIN = 1.5  # the kubelet's renewals jitter by 4% (0.4 s) plus the request's own time
FLOOD_SECONDS = 45.0


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def renew_time(lease: dict) -> float:
    return datetime.fromisoformat(lease["spec"]["renewTime"].replace("Z", "+00:00")).timestamp()


async def watch_renewals(kube: KubeClient, seen: list[float]) -> None:
    """Every renewTime of this node's Lease, as the apiserver stores it."""
    path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
    while True:
        with contextlib.suppress(Exception):
            seen.append(renew_time(await kube.get(f"{path}/{NODE}")))
            async for event in kube.watch(path, {"fieldSelector": f"metadata.name={NODE}"}, 300):
                if event.get("type") in ("ADDED", "MODIFIED"):
                    seen.append(renew_time(event["object"]))
        await asyncio.sleep(0.5)


async def run_flood(kind: str, port: int, count: int, seconds: float) -> dict:
    process = await asyncio.create_subprocess_exec(sys.executable, "-m", "tests.cluster.flood", kind, str(port),
                                                   str(count), str(seconds), cwd=REPO,
                                                   stdout=asyncio.subprocess.PIPE)
    out, _ = await asyncio.wait_for(process.communicate(), seconds + 60)
    assert process.returncode == 0, out
    return json.loads(out)


async def test_a_bogus_token_flood_gets_401_or_429_and_the_lease_keeps_renewing(node_agent):
    clients = 1000  # at once, each sending tokens the apiserver rejects
    await wait_for(lambda: api_answers(node_agent), 30, "the agent's kubelet API", describe=node_agent.describe)
    kube = await KubeClient.from_kubeconfig(str(ADMIN))
    renewals: list[float] = []
    watcher = asyncio.create_task(watch_renewals(kube, renewals))
    try:
        await wait_for(lambda: len(renewals) >= 2, 30, "the Lease renewed once while watched")
        pid = node_agent.proc.pid
        cpu_before, began, flood_start = cpu_seconds(pid), time.monotonic(), time.time()
        result = await run_flood("bogus-tokens", node_agent.api_port, clients, FLOOD_SECONDS)
        cpu = (cpu_seconds(pid) - cpu_before) / (time.monotonic() - began)
        flood_end = time.time()
        await wait_for(lambda: renewals[-1] > flood_end, RENEW_INTERVAL + 10, "a renewal after the flood")
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
        await kube.close()
    times = sorted(set(renewals))
    during = [(b - a) for a, b in zip(times, times[1:]) if b > flood_start and a < flood_end]
    worst = max(during)
    answers = {k: v for k, v in result["statuses"].items() if k.isdigit()}
    failures = sum(v for k, v in result["statuses"].items() if not k.isdigit())
    print(f"\n{clients} clients with bogus tokens for {FLOOD_SECONDS:g}s: {result['requests']} requests, "
          f"answers {answers}, connection failures {failures}; worst Lease renewal gap {worst:.2f}s "
          f"(gaps {', '.join(f'{g:.2f}' for g in during)}); agent CPU {cpu:.0%} of one core")
    assert set(answers) <= {"401", "429"} and sum(answers.values()) > 0, result
    assert failures <= 0.05 * result["requests"], result
    assert len(during) >= FLOOD_SECONDS // RENEW_INTERVAL - 1, during
    assert worst < RENEW_INTERVAL + RENEW_MARGIN, f"worst gap {worst:.2f}s: {during}"
    assert node_condition(node_object()).get("status") == "True"


@contextlib.contextmanager
def open_files_soft_limit(limit: int):
    """Processes started in the block inherit this soft limit (a distribution's usual default)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(limit, hard), hard))
    try:
        yield hard
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def open_files_limit_of(pid: int) -> tuple[str, str]:
    with open(f"/proc/{pid}/limits") as f:
        line = next(line for line in f if line.startswith("Max open files"))
    soft, hard = line.split()[3:5]
    return soft, hard


@pytest.fixture
async def node_agent_started_with_1024_files(cluster, cri, tmp_path: pathlib.Path):  # noqa: F811
    """Like node_agent, but started with a soft limit of 1024 open files, as systemd starts services."""
    with open_files_soft_limit(1024):
        agent = start_joined_agent(tmp_path)
    await wait_for(lambda: api_answers(agent), 60, "the agent's kubelet API", describe=agent.describe)
    yield agent
    agent.shutdown()
    unmount_under(str(tmp_path))


async def test_1100_idle_connections_do_not_stop_authenticated_requests_nor_pods(
        node_agent_started_with_1024_files, namespace):
    agent = node_agent_started_with_1024_files
    soft, hard = open_files_limit_of(agent.proc.pid)
    assert soft == hard, f"the agent kept a soft limit of {soft} open files (hard {hard})"
    flood = asyncio.create_task(run_flood("idle", agent.api_port, 1100, 40))
    try:
        await wait_for(lambda: len(os.listdir(f"/proc/{agent.proc.pid}/fd")) > 1100, 30,
                       "the agent to hold the 1,100 connections", describe=agent.describe)
        status, body = await asyncio.to_thread(direct, agent, "/healthz", cert="apiserver-kubelet-client")
        assert (status, body) == (200, "ok")
        await start(namespace, pod("during-idle-flood", namespace, "sleep 3600"), agent=agent)
        status, body = await asyncio.to_thread(direct, agent, "/pods", cert="apiserver-kubelet-client")
        assert status == 200 and "during-idle-flood" in body
    finally:
        result = await flood
    print(f"\n1,100 idle connections for 40s: {result}")
    assert result["opened"] >= 1100
    assert "Too many open files" not in agent.log()
    kubectl("delete", "pod", "during-idle-flood", "-n", namespace, "--wait=false", check=False)
