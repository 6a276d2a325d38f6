"""The agent as a Type=notify service sees it: systemd's notification socket gets READY=1 once the
agent serves and has read its static pods (their pod already running or starting), and
STOPPING=1 when it is stopped, which leaves the pod running."""

from __future__ import annotations

import socket
import urllib.request

from tests.helpers import wait_for
from tests.runtime.conftest import AgentProcess, phase, pod_manifest, write_manifest


def healthz(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


async def test_ready_comes_once_the_agent_serves_and_stopping_when_it_stops(cri, tmp_path, manifests, monkeypatch):
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(tmp_path / "notify"))
    notify.settimeout(60)
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "notify"))
    write_manifest(manifests, "notified", pod_manifest("notified", "sleep 600"))
    agent = AgentProcess(tmp_path, manifests).start()
    try:
        first = notify.recv(4096).decode().split("\n")
        assert first[0] == "READY=1" and first[1].startswith("STATUS=serving; 1 pods"), first
        assert healthz(agent.port)  # it serves by the time it says so
        name = f"notified-{agent.node}"
        await wait_for(lambda: phase((agent.pods() or {}).get(name) or {"status": {}}) == "Running", 60,
                       "the static pod Running")
        assert agent.stop() == 0
        assert notify.recv(4096).decode().split("\n")[0] == "STOPPING=1"
        running = [c for c in await cri.list_containers() if c.labels.get("io.kubernetes.pod.name") == name]
        assert running and running[0].state == 1  # CONTAINER_RUNNING: stopping the agent stops no pod
    finally:
        agent.shutdown()
        notify.close()
