"""What the agent serves without authentication on its healthz port: /healthz and nothing else,
as the kubelet's port 10248. Pod specs and the agent's settings are on a unix socket only root
can connect to, which `pykubelet pods` reads."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import urllib.error
import urllib.request

from pykubelet.util import unix_http
from tests.runtime.conftest import NODE, phase, pod_manifest, write_manifest

NOBODY = 65534


def healthz_port_get(agent, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{agent.port}{path}", timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


async def test_pod_data_is_only_on_the_root_only_socket(agent, manifests):
    write_manifest(manifests, "private", pod_manifest("private", "sleep 3600"))
    await agent.wait_pod(f"private-{NODE}", lambda p: phase(p) == "Running", 30, "Running")

    assert healthz_port_get(agent, "/healthz") == 200
    for path in ("/pods", "/debug/pods", "/debug/agent", f"/debug/pods/default/private-{NODE}"):
        assert healthz_port_get(agent, path) == 404, path
        code, body = unix_http.get(agent.socket, path)
        assert code == 200, path
    assert f"private-{NODE}" in {p["metadata"]["name"] for p in json.loads(unix_http.get(agent.socket, "/pods")[1])
                                 ["items"]}

    info = os.stat(agent.socket)
    assert stat.S_ISSOCK(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600 and info.st_uid == 0
    # Even with every directory above it open to all, another user cannot connect.
    probe = ("import socket, sys\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect(sys.argv[1])\n"
             "except PermissionError:\n    print('refused')\nelse:\n    print('connected')\n")
    modes = {d: stat.S_IMODE(os.stat(d).st_mode) for d in _parents(agent.socket)}
    try:
        for directory in modes:
            os.chmod(directory, modes[directory] | 0o005)
        result = subprocess.run(["/usr/bin/python3", "-c", probe, agent.socket], user=NOBODY, capture_output=True,
                                text=True, timeout=30)
    finally:
        for directory, mode in modes.items():
            os.chmod(directory, mode)
    assert result.stdout.strip() == "refused", result.stderr


def _parents(path: str) -> list[str]:
    """The directories from the socket's up to the first one every user can already enter."""
    out, directory = [], os.path.dirname(path)
    while directory != "/" and stat.S_IMODE(os.stat(directory).st_mode) & 0o001 == 0:
        out.append(directory)
        directory = os.path.dirname(directory)
    return out
