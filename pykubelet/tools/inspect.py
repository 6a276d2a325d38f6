"""`pykubelet pods` (what the agent runs, from its /pods on <root-dir>/pykubelet.sock, root only) and `pykubelet cri ...` (crictl-like,
straight to the runtime over the same CRI client the agent uses)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from google.protobuf.json_format import MessageToDict

from pykubelet.cri import errors
from pykubelet.cri.client import CRIClient
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.config import Settings
from pykubelet.util import unix_http

DEFAULT_ENDPOINT = "unix:///run/containerd/containerd.sock"


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("   ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows)


def _age(seconds_since_epoch: float) -> str:
    delta = max(0, int(time.time() - seconds_since_epoch))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if delta >= size:
            return f"{delta // size}{unit}"
    return f"{delta}s"


def _container_summary(status: dict[str, Any]) -> str:
    state = status.get("state", {})
    kind = next(iter(state), "unknown")
    detail = state.get(kind, {}).get("reason") or ""
    if kind == "terminated":
        detail = f"{detail}:{state[kind].get('exitCode')}"
    return f"{status['name']}={kind}" + (f"({detail})" if detail else "")


def pods_table(pod_list: dict[str, Any]) -> str:
    rows = [["NAMESPACE", "NAME", "PHASE", "READY", "RESTARTS", "IP", "CONTAINERS"]]
    for pod in pod_list.get("items", []):
        status = pod.get("status", {})
        containers = status.get("containerStatuses", [])
        ready = sum(1 for c in containers if c.get("ready"))
        rows.append([pod["metadata"].get("namespace", ""), pod["metadata"]["name"], status.get("phase", ""),
                     f"{ready}/{len(containers)}", str(sum(c.get("restartCount", 0) for c in containers)),
                     status.get("podIP", ""), " ".join(_container_summary(c) for c in containers)])
    return _table(rows)


def _pods(args: argparse.Namespace) -> int:
    path = unix_http.agent_socket(args.root_dir)
    try:
        code, body = unix_http.get(path, "/pods", timeout=5)
        pod_list = json.loads(body) if code == 200 else None
    except (OSError, ValueError) as e:
        print(f"pykubelet pods: cannot reach the agent at {path}: {e}. Is pykubelet running? (with this "
              "--root-dir; as root)", file=sys.stderr)
        return 1
    if pod_list is None:
        print(f"pykubelet pods: the agent answered HTTP {code} on {path}", file=sys.stderr)
        return 1
    if args.output == "json":
        print(json.dumps(pod_list, indent=2))
    else:
        print(pods_table(pod_list))
    return 0


async def _resolve(cri: CRIClient, prefix: str, kind: str) -> str:
    items = await (cri.list_containers() if kind == "container" else cri.list_pod_sandbox())
    matches = [i.id for i in items if i.id.startswith(prefix)]
    if len(matches) != 1:
        raise SystemExit(f"pykubelet cri: {len(matches)} {kind}s match {prefix!r}; want exactly one")
    return matches[0]


_CONTAINER_STATES = {api.CONTAINER_CREATED: "Created", api.CONTAINER_RUNNING: "Running",
                     api.CONTAINER_EXITED: "Exited", api.CONTAINER_UNKNOWN: "Unknown"}


async def _cri(args: argparse.Namespace) -> int:
    async with CRIClient(args.runtime_endpoint) as cri:
        if args.what == "ps":
            sandboxes = {s.id: s for s in await cri.list_pod_sandbox()}
            tags = {i.id: i.repo_tags[0] for i in await cri.list_images() if i.repo_tags}
            rows = [["CONTAINER", "IMAGE", "CREATED", "STATE", "NAME", "ATTEMPT", "POD ID", "POD"]]
            for c in sorted(await cri.list_containers(), key=lambda c: -c.created_at):
                if not args.all and c.state != api.CONTAINER_RUNNING:
                    continue
                pod = sandboxes.get(c.pod_sandbox_id)
                image = c.image.user_specified_image or tags.get(c.image_ref) or tags.get(c.image.image) or c.image.image
                rows.append([c.id[:13], image, _age(c.created_at / 1e9),
                             _CONTAINER_STATES.get(c.state, "?"), c.metadata.name, str(c.metadata.attempt),
                             c.pod_sandbox_id[:13], pod.metadata.name if pod else ""])
            print(_table(rows))
        elif args.what == "pods":
            rows = [["POD ID", "CREATED", "STATE", "NAME", "NAMESPACE", "ATTEMPT"]]
            for s in sorted(await cri.list_pod_sandbox(), key=lambda s: -s.created_at):
                rows.append([s.id[:13], _age(s.created_at / 1e9),
                             "Ready" if s.state == api.SANDBOX_READY else "NotReady",
                             s.metadata.name, s.metadata.namespace, str(s.metadata.attempt)])
            print(_table(rows))
        elif args.what == "images":
            rows = [["IMAGE", "TAG", "IMAGE ID", "SIZE"]]
            for image in await cri.list_images():
                for tag in image.repo_tags or ["<none>:<none>"]:
                    repo, _, version = tag.rpartition(":")
                    rows.append([repo, version, image.id.removeprefix("sha256:")[:13], f"{image.size / 1e6:.1f}MB"])
            print(_table(rows))
        elif args.what == "info":
            version, status = await cri.version(), await cri.status(verbose=True)
            info = {}
            for key, value in status.info.items():
                try:
                    info[key] = json.loads(value)
                except ValueError:
                    info[key] = value
            print(json.dumps({"version": MessageToDict(version), "status": MessageToDict(status.status),
                              "info": info}, indent=2))
        elif args.what == "logs":
            status = (await cri.container_status(await _resolve(cri, args.id, "container"))).status
            sys.stdout.write(read_cri_log(status.log_path))
        elif args.what == "inspect":
            try:
                response = await cri.container_status(await _resolve(cri, args.id, "container"), verbose=True)
            except SystemExit:
                response = await cri.pod_sandbox_status(await _resolve(cri, args.id, "sandbox"), verbose=True)
            print(json.dumps(MessageToDict(response), indent=2))
    return 0


def read_cri_log(path: str) -> str:
    """The text of a CRI log file: each line is `<time> <stream> <P|F> <text>`; P joins the next."""
    out = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            parts = line.rstrip("\n").split(" ", 3)
            if len(parts) < 4:
                continue
            out.append(parts[3] + ("" if parts[2] == "P" else "\n"))
    return "".join(out)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="pykubelet")
    sub = parser.add_subparsers(dest="command", required=True)
    pods = sub.add_parser("pods", help="pods the running agent manages, with their status")
    pods.add_argument("--root-dir", default=Settings().root_dir, help="the agent's --root-dir")
    pods.add_argument("-o", "--output", choices=("table", "json"), default="table")
    cri = sub.add_parser("cri", help="look at the container runtime directly (like crictl)")
    cri.add_argument("--runtime-endpoint", "-r", default=DEFAULT_ENDPOINT)
    what = cri.add_subparsers(dest="what", required=True)
    ps = what.add_parser("ps", help="containers")
    ps.add_argument("-a", "--all", action="store_true", help="also containers that are not running")
    what.add_parser("pods", help="pod sandboxes")
    what.add_parser("images", help="images")
    what.add_parser("info", help="the runtime's version, conditions (RuntimeReady, NetworkReady) and config")
    logs = what.add_parser("logs", help="a container's log")
    logs.add_argument("id", help="container ID or a unique prefix")
    inspect = what.add_parser("inspect", help="a container's or sandbox's full status")
    inspect.add_argument("id", help="container or sandbox ID, or a unique prefix")
    args = parser.parse_args(argv)
    if args.command == "pods":
        return _pods(args)
    try:
        return asyncio.run(_cri(args))
    except errors.CRIError as e:
        print(f"pykubelet cri: {e}", file=sys.stderr)
        return 1
