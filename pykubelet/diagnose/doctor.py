"""`pykubelet doctor`: is this node healthy, and if not, why? Every cause of a NotReady node the
kubelet knows, checked with evidence: the agent, the container runtime, the pod network,
resource pressure, the apiserver (credentials, Lease, the Node's conditions), the clock and the
certificates. Each check says OK, WARN or FAIL and the one command that shows more; the exit
code is 1 when anything FAILs.

It needs the agent's settings. It takes the same flags as the agent (and --config); when an agent
answers on the root dir they name (its root-only socket <root-dir>/pykubelet.sock), the settings
that agent runs with win, so a bare `pykubelet doctor` checks what the running agent uses. When no agent
answers, it says so first and checks the rest with the flags given.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
import time
import typing
from typing import Any

from pykubelet.api.eviction import Threshold
from pykubelet.config import ConfigError, Settings, build_parser, settings_from_args
from pykubelet.diagnose import doctor_agent, doctor_api, doctor_host, doctor_network, doctor_runtime
from pykubelet.diagnose.checks import AREAS, FAIL, OK, WARN, Node

EXIT_FAILED, EXIT_CONFIG = 1, 2
NOT_READY_AREAS = ("Agent", "Container runtime", "Network")
MARK = {OK: "OK  ", WARN: "WARN", FAIL: "FAIL"}


def _build(cls: Any, data: dict[str, Any]) -> Any:
    """A settings dataclass from its JSON (settings_json): nested groups and thresholds rebuilt,
    fields this version does not know ignored."""
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        value, kind = data[f.name], hints[f.name]
        if dataclasses.is_dataclass(kind) and isinstance(value, dict):
            value = _build(kind, value)
        elif f.name == "eviction_hard" and isinstance(value, dict):
            value = {signal: Threshold(**t) for signal, t in value.items()}
        values[f.name] = value
    return cls(**values)


def settings_from_json(data: dict[str, Any]) -> Settings:
    return _build(Settings, data)


def discover(argv: list[str]) -> tuple[Node, str]:
    parser = build_parser()
    parser.prog = "pykubelet doctor"
    parser.description = __doc__.split("\n\n")[0]
    parser.add_argument("-o", "--output", choices=("text", "json"), default="text")
    args = parser.parse_args(argv)
    settings = settings_from_args(args)
    url, agent = doctor_agent.running_agent(settings)
    if agent and agent.get("settings"):
        node = Node(settings_from_json(agent["settings"]), f"the settings of the running agent (pid {agent['pid']})")
        url = doctor_agent.healthz_url(node.settings) if node.settings.server.healthz_port else ""  # its own port
    else:
        node = Node(settings, "the flags given to doctor" if argv else "the default settings (no flags given)")
    node.agent, node.agent_url = agent, url
    return node, args.output


async def run_checks(node: Node) -> None:
    doctor_agent.check(node)
    await doctor_runtime.check(node)
    await doctor_api.check(node)
    await doctor_network.check(node)
    doctor_host.pressure(node)
    doctor_host.clock(node)
    doctor_host.certificates(node)


def summary(node: Node) -> list[str]:
    failed = [c for c in node.checks if c.status == FAIL]
    counts = {s: sum(1 for c in node.checks if c.status == s) for s in (FAIL, WARN, OK)}
    lines = [", ".join(f"{n} {s}" for s, n in counts.items()) + "."]
    blockers = [c for c in failed if c.area in NOT_READY_AREAS]
    if blockers:
        lines += ["The node cannot be Ready:", *(f"  - {c.title}" for c in blockers)]
    others = [c for c in failed if c.area not in NOT_READY_AREAS]
    if others:
        lines += ["Also wrong:", *(f"  - {c.area}: {c.title}" for c in others)]
    if not failed:
        lines.append("Nothing here keeps this node from being Ready.")
    return lines


def render(node: Node) -> str:
    s = node.settings
    mode = f"joined to {s.cluster.kubeconfig}" if s.cluster.kubeconfig else "standalone"
    out = [f"pykubelet doctor: node {s.node_name} ({mode}), {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
           f"Settings: {node.settings_from}", ""]
    for area in AREAS:
        checks = [c for c in node.checks if c.area == area]
        if not checks:
            continue
        out.append(area)
        for c in checks:
            out.append(f"  {MARK[c.status]}  {c.title}")
            out += [f"        {line}" for line in c.evidence]
            if c.more and c.status != OK:
                out.append(f"        more: {c.more}")
        out.append("")
    return "\n".join(out + summary(node))


def main(argv: list[str]) -> int:
    try:
        node, output = discover(argv)
    except ConfigError as e:
        print(f"pykubelet doctor: invalid configuration: {e}", file=sys.stderr)
        return EXIT_CONFIG
    asyncio.run(run_checks(node))
    if output == "json":
        print(json.dumps({"node": node.settings.node_name, "settings_from": node.settings_from,
                          "checks": [dataclasses.asdict(c) for c in node.checks], "summary": summary(node),
                          "ok": not any(c.status == FAIL for c in node.checks)}, indent=2))
    else:
        print(render(node))
    return EXIT_FAILED if any(c.status == FAIL for c in node.checks) else 0
