"""`pykubelet explain pod [-n NAMESPACE] NAME`: the node-side story of one pod, from the agent.

It reads /debug/pods/<namespace>/<name> on the agent's root-only socket (the pod, the status the
agent computed, and every step the agent recorded for it: pods/history.py) and prints it in
order, with times and durations, then the one line that says why the pod is not Running and
Ready (diagnose/verdict.py), or that it is. `-o json` gives the same to scripts.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.parse
from datetime import datetime
from typing import Any

from pykubelet.diagnose import verdict
from pykubelet.config import Settings
from pykubelet.network import assets
from pykubelet.util import unix_http
from pykubelet.util.durations import format_duration

MARKS = {True: "✓", False: "✗", None: "·"}


class AgentUnreachable(Exception):
    pass


def fetch(root_dir: str, path: str) -> tuple[int, Any]:
    where = unix_http.agent_socket(root_dir)
    try:
        code, body = unix_http.get(where, path)
    except OSError as e:
        raise AgentUnreachable(f"cannot reach the agent at {where}: {e}. Is pykubelet running? (with this "
                               "--root-dir; as root)") from None
    try:
        return code, json.loads(body)
    except ValueError:
        return code, {"error": f"{where} {path}: HTTP {code}"}


def find_pod(root_dir: str, namespace: str, name: str) -> dict[str, Any]:
    """The /debug document of the pod; a static pod may be named without its -<node> suffix."""
    quoted = lambda ns, n: f"/debug/pods/{urllib.parse.quote(ns)}/{urllib.parse.quote(n)}"  # noqa: E731
    code, doc = fetch(root_dir, quoted(namespace, name))
    if code == 200:
        return doc
    if code != 404 or "pods" not in doc:
        raise LookupError(doc.get("error") or f"the agent answered HTTP {code}")
    _, agent = fetch(root_dir, "/debug/agent")
    static_name = f"{name}-{agent.get('node', '')}"
    if f"{namespace}/{static_name}" in doc["pods"]:
        return fetch(root_dir, quoted(namespace, static_name))[1]
    here = ", ".join(doc["pods"]) or "none"
    raise LookupError(f"{doc['error']} (pods it knows: {here}). A pod no node runs yet is the scheduler's "
                      f"business: kubectl describe pod -n {namespace} {name}")


def _clock(seconds: float, now: float) -> str:
    same_day = time.localtime(seconds)[:3] == time.localtime(now)[:3]
    return time.strftime("%H:%M:%S" if same_day else "%b %d %H:%M:%S", time.localtime(seconds))


def _epoch(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def _took(seconds: float | None) -> str:
    if seconds is None:
        return ""
    return f" [{seconds:.2f}s]" if seconds < 60 else f" [{format_duration(seconds)}]"


def _offset(seconds: float) -> str:
    return f"+{seconds:.1f}s" if seconds < 60 else f"+{format_duration(seconds)}"


def _chain(text: str) -> str:
    """Agent mode: what the shim stands for (the agent runs the pod network's plugins itself)."""
    if assets.SHIM_NAME not in text:
        return text
    try:
        plugins = [p["type"] for p in assets.render("pod-network.conflist", bridge="", pod_cidr="",
                                                    ipam_dir="")["plugins"]]
    except (OSError, KeyError):
        return text
    return text.replace(assets.SHIM_NAME, f"{assets.SHIM_NAME} (the agent runs {' → '.join(plugins)})")


def _container_line(cs: dict[str, Any], now: float) -> str:
    state = cs.get("state") or {}
    restarts = cs.get("restartCount", 0)
    if "running" in state:
        started = state["running"].get("startedAt", "")
        since = _clock(_epoch(started), now) if started else "?"
        text = f"running since {since}" + (", ready" if cs.get("ready") else ", not ready")
    elif "waiting" in state:
        text = f"waiting: {state['waiting'].get('reason', '')}"
    else:
        term = state.get("terminated") or {}
        text = f"terminated: {term.get('reason', '')}, exit code {term.get('exitCode')}"
    last = (cs.get("lastState") or {}).get("terminated")
    if last:
        text += f"; last exit code {last.get('exitCode')} ({last.get('reason', '')})"
    return text + f"; {restarts} restart{'s' if restarts != 1 else ''}"


def _steps(history: dict[str, Any], now: float) -> list[str]:
    steps = history.get("steps") or []
    if not steps:
        return ["  (nothing recorded yet)"]
    first = steps[0]["at"]
    width = max((len(s["container"]) for s in steps), default=0)
    lines = []
    for i, step in enumerate(steps):
        if i == history.get("dropped_after") and history.get("dropped"):
            lines.append(f"  … {history['dropped']} steps left out here (each pod keeps its first and its "
                         "latest ones) …")
        who = step["container"].ljust(width) if width else ""
        text = _chain(step["text"]) if step["kind"] == "sandbox" else step["text"]
        line = (f"  {_clock(step['at'], now)} {_offset(step['at'] - first):>7}  {MARKS[step['ok']]} "
                f"{who}{'  ' if width else ''}{text}{_took(step.get('seconds'))}")
        if step["count"] > 1:
            line += f"  (×{step['count']}, last at {_clock(step['last_at'], now)})"
        lines.append(line)
        for name, iface in (step.get("details", {}).get("cni_interfaces") or {}).items():
            if iface.get("in_pod") and name != "lo":
                lines.append(f"  {'':>17}     {'':{width}}{'  ' if width else ''}  CNI result: {name} "
                             f"{', '.join(iface['addresses']) or 'no address'}")
    return lines


def _probes(history: dict[str, Any], now: float) -> list[str]:
    lines = []
    for p in history.get("probes") or []:
        kind = p["probe"].removesuffix("Probe")
        if p["ok"]:
            text = f"passing ({p['streak']} in a row)"
            if p.get("last_failure"):
                text += f"; last failure {format_duration(now - p['last_failure_at'])} ago: {p['last_failure']}"
        else:
            text = (f"FAILING {p['streak']} time{'s' if p['streak'] != 1 else ''} in a row, for "
                    f"{format_duration(now - p['since'])}: {p['message'] or '(no output)'}")
        lines.append(f"  {p['container']}  {kind}: {text}")
    return lines


def render(doc: dict[str, Any], ok: bool, line: str) -> str:
    now, pod, history = doc["now"], doc.get("pod"), doc.get("history") or {}
    meta = (pod or {}).get("metadata") or {}
    status = (pod or {}).get("status") or {}
    namespace, name = meta.get("namespace") or history.get("namespace"), meta.get("name") or history.get("name")
    uid = meta.get("uid") or history.get("uid", "")
    static = (meta.get("annotations") or {}).get("kubernetes.io/config.source") == "file"
    out = [f"Pod {namespace}/{name}  ({'static pod, ' if static else ''}uid {uid})"]
    if pod is not None:
        ready = next((c["status"] for c in status.get("conditions") or [] if c.get("type") == "Ready"), "?")
        facts = [f"phase {status.get('phase', '?')}", f"Ready {ready}"]
        if status.get("podIP"):
            facts.append(f"IP {status['podIP']}")
        out.append("  " + ", ".join(facts))
        for cs in (*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])):
            out.append(f"  {cs['name']}: {_container_line(cs, now)}")
    else:
        out.append("  no longer on this node")
    out += ["", "What the node did (✓ done, ✗ failed, · a fact; [time it took]):", *_steps(history, now)]
    probes = _probes(history, now)
    if probes:
        out += ["", "Probes, last results:", *probes]
    hints = look_next(doc)
    if hints:
        out += ["", "To see more:", *(f"  {command}    ({what})" for command, what in hints)]
    out += ["", f"→ {line}"]
    return "\n".join(out)


def look_next(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """The commands that show what the history cannot: a crashed container's output, the images here."""
    pod, steps = doc.get("pod") or {}, (doc.get("history") or {}).get("steps") or []
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    static = (meta.get("annotations") or {}).get("kubernetes.io/config.source") == "file"
    hints = []
    for cs in (*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])):
        reason = ((cs.get("state") or {}).get("waiting") or {}).get("reason", "")
        exited = next((s for s in reversed(steps) if s["kind"] == "exit" and s["container"] == cs["name"]), None)
        if reason == "CrashLoopBackOff" and exited is not None:
            command = (f"pykubelet cri logs {exited['details']['id'][:13]}" if static else
                       f"kubectl logs -n {meta.get('namespace')} {meta.get('name')} -c {cs['name']} --previous")
            hints.append((command, f"what {cs['name']} printed before it exited"))
        elif reason in ("ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull"):
            hints.append(("pykubelet cri images", "the images this node has"))
    return hints


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="pykubelet explain", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    pod = sub.add_parser("pod", help="what the node did for one pod, and why it is not Running/Ready")
    pod.add_argument("name")
    pod.add_argument("-n", "--namespace", default="default")
    pod.add_argument("-o", "--output", choices=("text", "json"), default="text")
    pod.add_argument("--root-dir", default=Settings().root_dir, help="the agent's --root-dir")
    args = parser.parse_args(argv)
    try:
        doc = find_pod(args.root_dir, args.namespace, args.name)
    except (AgentUnreachable, LookupError) as e:
        print(f"pykubelet explain: {e}", file=sys.stderr)
        return 1
    ok, line = verdict.why(doc.get("pod"), doc.get("history"), doc["now"])
    if args.output == "json":
        print(json.dumps({**doc, "verdict": {"ok": ok, "text": line}}, indent=2))
    else:
        print(render(doc, ok, line))
    return 0
