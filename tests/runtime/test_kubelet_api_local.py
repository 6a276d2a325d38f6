"""The kubelet API of a standalone node (anonymous, AlwaysAllow): a follower survives log
rotation, a taken port is a clear error, and debugging handlers can be switched off."""

from __future__ import annotations

import os
import socket
import ssl
import threading
import urllib.error
import urllib.request

from tests.helpers import wait_for
from tests.runtime.conftest import NODE, AgentProcess, main_status, pod_manifest, write_manifest

OPEN = ("--anonymous-auth", "--authorization-mode", "AlwaysAllow")


def get(agent: AgentProcess, path: str, timeout: float = 10) -> tuple[int, str]:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{agent.api_port}{path}", context=context,
                                    timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


async def test_follow_goes_on_after_the_log_is_rotated(cri, tmp_path, manifests):
    agent = AgentProcess(tmp_path, manifests, *OPEN).start()
    try:
        write_manifest(manifests, "counter", pod_manifest(
            "counter", "i=0; while true; do echo n-$i; i=$((i+1)); sleep 0.2; done"))
        pod = await agent.wait_pod(f"counter-{NODE}", lambda p: "running" in main_status(p)["state"], 60,
                                   "running")
        received: list[str] = []

        def follow() -> None:
            context = ssl.create_default_context()
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
            url = f"https://127.0.0.1:{agent.api_port}/containerLogs/default/counter-{NODE}/main?follow=true"
            try:
                with urllib.request.urlopen(url, context=context, timeout=30) as r:
                    for line in r:
                        received.append(line.decode().strip())
            except OSError:
                pass
        threading.Thread(target=follow, daemon=True).start()
        await wait_for(lambda: len(received) >= 3, 20, "the follower's first lines")

        container_id = main_status(pod)["containerID"].split("://")[1]
        log_path = (await cri.container_status(container_id)).status.log_path
        os.rename(log_path, log_path + ".1")  # rotation as the kubelet does it: rename, then reopen
        await cri.reopen_container_log(container_id)
        seen = len(received)
        await wait_for(lambda: os.path.getsize(log_path) > 100 and len(received) >= seen + 5, 20,
                       "lines written after the rotation to reach the follower", describe=agent.describe)
        numbers = [int(line.split("-")[1]) for line in received]
        assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))  # none lost, none twice
    finally:
        agent.shutdown()


async def test_a_taken_port_stops_the_agent_with_the_address(cri, tmp_path, manifests):
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        agent = AgentProcess(tmp_path, manifests, *OPEN, "--port", str(port)).start()
        assert agent.proc.wait(timeout=30) == 1
    assert f"cannot listen on 0.0.0.0:{port} for the kubelet API: already in use" in agent.log()


async def test_debugging_handlers_can_be_switched_off(cri, tmp_path, manifests):
    agent = AgentProcess(tmp_path, manifests, *OPEN, "--enable-debugging-handlers=false").start()
    try:
        await wait_for(lambda: agent.pods() is not None, 20, "the agent up", describe=agent.describe)
        await wait_for(lambda: get(agent, "/healthz")[0] == 200, 20, "the kubelet API up")
        assert get(agent, "/containerLogs/default/x/main") == (405, "Debug endpoints are disabled.")
        assert get(agent, "/pods")[0] == 200
    finally:
        agent.shutdown()
