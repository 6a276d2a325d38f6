"""Is the agent itself working? Its healthz, its loops, its last pod sync, its PLEG relist.

The kubelet's own NotReady causes: a dead agent renews no Lease (the control plane then marks the
node Unknown), and an agent whose PLEG has not relisted for 3 minutes reports "PLEG is not healthy".
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from typing import Any

from pykubelet.config import Settings
from pykubelet.diagnose.checks import FAIL, OK, WARN, Node, ago
from pykubelet.util import unix_http

AREA = "Agent"
SUBCOMMANDS = ("pods", "cri", "leaks", "doctor", "explain")


def healthz_url(settings: Settings) -> str:
    host = settings.server.healthz_bind_address
    host = "127.0.0.1" if host in ("", "0.0.0.0") else ("::1" if host == "::" else host)
    return f"http://{'[' + host + ']' if ':' in host else host}:{settings.server.healthz_port}"


def get(url: str, timeout: float = 5) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def running_agent(settings: Settings) -> tuple[str, dict[str, Any] | None]:
    """(its healthz URL, its /debug/agent) for the agent these settings point at (its root dir's
    socket, which only root can use); None if nothing answers there."""
    url = healthz_url(settings) if settings.server.healthz_port else ""
    try:
        code, body = unix_http.get(unix_http.agent_socket(settings.root_dir), "/debug/agent", timeout=5)
    except OSError:
        return url, None
    if code != 200:  # it answers, at least
        return url, {}
    try:
        return url, json.loads(body)
    except ValueError:
        return url, {}


def agent_processes() -> list[str]:
    """Other pykubelet agents on this machine ("pid 42: --healthz-port 10248 ..."), for evidence."""
    found = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        except OSError:
            continue
        at = next((i for i, a in enumerate(argv) if a.endswith(("/pykubelet", "pykubelet.cli"))), None)
        if at is None or (len(argv) > at + 1 and argv[at + 1] in SUBCOMMANDS):
            continue
        flags = argv[at + 1:]
        port = next((flags[i + 1] for i, a in enumerate(flags[:-1]) if a == "--healthz-port"), "10248")
        found.append(f"pid {pid} (healthz port {port})")
    return found


def check(node: Node) -> None:
    s = node.settings
    more = "journalctl -u pykubelet" if os.path.isdir("/run/systemd/system") else "pgrep -af pykubelet"
    if node.agent is None:
        where = unix_http.agent_socket(s.root_dir)
        others = agent_processes()
        root_only = [] if os.geteuid() == 0 else [f"{where} answers root only: run doctor as root"]
        node.add(AREA, FAIL, f"the agent is not running: nothing answers on {where}", [
            *root_only, "pykubelet processes on this machine: " + (", ".join(others) if others else "none"),
            "without it no pod is started, restarted or stopped, and in a cluster no Lease is renewed: "
            "the control plane marks the node NotReady (Unknown) about 40s later",
            "the checks below use " + node.settings_from], more)
        return
    try:
        code, body = get(f"{node.agent_url}/healthz") if node.agent_url else (200, b"")
    except (urllib.error.URLError, OSError) as e:
        code, body = 0, f"nothing answers on {node.agent_url}/healthz ({getattr(e, 'reason', e)})".encode()
    facts = node.agent
    pid = facts.get("pid", "?")
    uptime = f", up since {time.strftime('%H:%M:%S', time.localtime(facts['started_at']))}" \
        if facts.get("started_at") else ""
    if code == 200:
        node.add(AREA, OK, f"running (pid {pid}{uptime})" + (", /healthz answers ok" if node.agent_url else ""),
                 more=more)
    else:
        node.add(AREA, FAIL, f"running (pid {pid}) but /healthz fails: {body.decode(errors='replace').strip()}",
                 more=more)
    loops = facts.get("loops") or {}
    dead = [f"{name}: {info.get('error') or 'ended'}" for name, info in loops.items() if not info.get("alive")]
    if dead:
        node.add(AREA, FAIL, f"{len(dead)} of its loops died: the agent stops itself soon", dead, more)
    elif loops:
        node.add(AREA, OK, f"all {len(loops)} loops alive: {', '.join(sorted(loops))}")
    last_sync, pods = facts.get("last_sync") or 0, facts.get("pods", 0)
    if pods and last_sync and time.time() - last_sync > 2 * s.pods.sync_frequency:
        node.add(AREA, WARN, f"no pod synced for {ago(last_sync)[:-4]} ({pods} pods; each is synced at least every "
                             f"{s.pods.sync_frequency:g}s)", more=more)
    elif pods:
        node.add(AREA, OK, f"{pods} pod{'s' if pods != 1 else ''}, last pod sync {ago(last_sync)}")
    else:
        node.add(AREA, OK, "no pods to run yet")
    pleg = facts.get("pleg") or {}
    if pleg:
        relisted, threshold = pleg.get("last_relist") or 0, pleg.get("threshold_seconds", 180)
        if not pleg.get("healthy"):
            seen = ago(relisted) if relisted else "never"
            node.add(AREA, FAIL, f"PLEG is not healthy: last relist {seen}; threshold is {threshold:g}s",
                     ["the runtime does not answer its list calls in time: see Container runtime below"],
                     "pykubelet cri ps")
        elif time.time() - relisted > 10:
            node.add(AREA, WARN, f"PLEG last relisted {ago(relisted)} (it relists every second; NotReady after "
                                 f"{threshold:g}s)", more="pykubelet cri ps")
        else:
            node.add(AREA, OK, f"PLEG relisted {ago(relisted)} (NotReady after {threshold:g}s without one)")
