"""How often a cancelled RunPodSandbox leaves a shim behind.

A shim is left behind when its -id names no sandbox or container of its containerd.

    cancelled_sandboxes.py ENDPOINT --state-dir DIR [--attempts N] [--parallel N]
                           [--delays-ms 50,100,...] [--after start|daemon]

Each attempt starts a RunPodSandbox (host network: no CNI involved) and cancels the call after
the next delay of the list, as an agent killed mid-creation would; once containerd has
settled, the shims of that containerd that serve nothing are counted (and what is left of
them described), then everything the attempt made is removed: its sandbox, and an orphan
shim with its pause process, runc state, rootfs mount and bundle. Prints one line per attempt
and a summary. Run it against a containerd of its own (containerd-node.sh), never the
machine's: it kills what it finds orphaned there.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from pykubelet.cri import errors  # noqa: E402
from pykubelet.cri.client import CRIClient  # noqa: E402
from pykubelet.cri.v1 import api_pb2 as api  # noqa: E402
from pykubelet.tools.shim_checks import CRI_NAMESPACE, SHIM, Shim, running_shims, socket_of  # noqa: E402

NAMESPACE = "pkl-shim-probe"
SETTLE_SECONDS = 1.5


def sandbox_config(name: str, logs: str) -> api.PodSandboxConfig:
    uid = str(uuid.uuid4())
    return api.PodSandboxConfig(
        metadata=api.PodSandboxMetadata(name=name, uid=uid, namespace=NAMESPACE, attempt=0),
        log_directory=os.path.join(logs, uid),
        linux=api.LinuxPodSandboxConfig(security_context=api.LinuxSandboxSecurityContext(
            namespace_options=api.NamespaceOption(network=api.NODE, pid=api.CONTAINER, ipc=api.POD))))


async def unmatched_shims(cri: CRIClient) -> list[Shim]:
    socket = socket_of(cri.endpoint)
    ids = {s.id for s in await cri.list_pod_sandbox()} | {c.id for c in await cri.list_containers()}
    shims = await asyncio.to_thread(running_shims)
    return [s for s in shims if os.path.realpath(s.address) == socket and s.namespace == CRI_NAMESPACE
            and s.id not in ids]


def children(pid: int, tid: int | str | None = None) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{tid or pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def describe_orphan(shim: Shim, state_dir: str) -> dict:
    bundle = os.path.join(state_dir, "io.containerd.runtime.v2.task", CRI_NAMESPACE, shim.id)
    runc_state = os.path.join(state_dir, "runc", CRI_NAMESPACE, shim.id)
    kids = children(shim.pid)
    return {"id": shim.id[:13], "pid": shim.pid, "bundle": os.path.isdir(bundle),
            "bundle_files": sorted(os.listdir(bundle)) if os.path.isdir(bundle) else [],
            "runc_state": os.path.isdir(runc_state), "children": len(kids)}


def listening_sockets(pid: int) -> list[str]:
    """The paths of the unix sockets a process has open (a shim's: the one it serves on)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    with open("/proc/net/unix") as f:
        rows = [line.split() for line in f.readlines()[1:]]
    return [row[7] for row in rows if len(row) > 7 and row[6] in inodes and row[7].startswith("/")]


def remove_orphan(shim: Shim, state_dir: str) -> None:
    """What containerd does for a shim it gave up on: the task's processes killed, runc's state
    deleted, the rootfs unmounted, the bundle removed; and the shim itself stopped, its socket
    removed (a killed shim leaves it)."""
    runc_root = os.path.join(state_dir, "runc", CRI_NAMESPACE)
    sockets = listening_sockets(shim.pid)
    for pid in children(shim.pid):
        os.kill(pid, signal.SIGKILL)
    subprocess.run(["runc", "--root", runc_root, "delete", "--force", shim.id], capture_output=True)
    os.kill(shim.pid, signal.SIGKILL)
    for path in sockets:
        os.unlink(path)
    bundle = os.path.join(state_dir, "io.containerd.runtime.v2.task", CRI_NAMESPACE, shim.id)
    subprocess.run(["umount", "-l", os.path.join(bundle, "rootfs")], capture_output=True)
    subprocess.run(["rm", "-rf", bundle], check=True)


async def remove_probe_sandboxes(cri: CRIClient) -> int:
    removed = 0
    for s in await cri.list_pod_sandbox():
        if s.metadata.namespace == NAMESPACE:
            await cri.stop_pod_sandbox(s.id)
            await cri.remove_pod_sandbox(s.id)
            removed += 1
    return removed


def processes() -> set[str]:
    return set(filter(str.isdigit, os.listdir("/proc")))


def wait_for_shim(socket: str, daemon: bool, seen: set[str], timeout: float) -> bool:
    """Block until a shim of the containerd at `socket` appears that was not `seen`: its
    `start` run (containerd starting it), or with `daemon` the shim daemon that run forks."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = processes()
        for pid in pids - seen:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    argv = f.read().decode(errors="replace").split("\0")
            except OSError:
                continue
            if (argv and os.path.basename(argv[0]) == SHIM and "-address" in argv
                    and os.path.realpath(argv[argv.index("-address") + 1]) == socket
                    and ("start" not in argv and "delete" not in argv if daemon else "start" in argv)):
                return True
        seen = pids
        time.sleep(0.002)
    return False


async def one_attempt(endpoint: str, name: str, delay: float, logs: str, after: str) -> str:
    cri = CRIClient(endpoint)
    try:
        seen = processes()
        call = asyncio.create_task(cri.run_pod_sandbox(sandbox_config(name, logs)))
        if after:  # the delay counts from the shim's start run, or its daemon
            started = asyncio.ensure_future(asyncio.to_thread(wait_for_shim, socket_of(endpoint), after == "daemon",
                                                              seen, 5.0))
            await asyncio.wait({call, started}, return_when=asyncio.FIRST_COMPLETED)
            if not call.done() and not await started:
                return "no shim start seen"
        done, _ = await asyncio.wait({call}, timeout=delay)
        if done:
            try:
                call.result()
                return "created"
            except errors.CRIError as e:
                return f"failed: {e}"
        call.cancel()
        await asyncio.gather(call, return_exceptions=True)
        return "cancelled"
    finally:
        await cri.close()


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("endpoint")
    parser.add_argument("--attempts", type=int, default=60)
    parser.add_argument("--parallel", type=int, default=1,
                        help="RunPodSandbox calls per attempt, all cancelled after the same delay (an agent "
                             "creating several pods)")
    parser.add_argument("--delays-ms", default="50,100,150,200,250,300,400,500,600,800,1000,1500")
    parser.add_argument("--state-dir", required=True, help="that containerd's state dir (its bundles)")
    parser.add_argument("--after", choices=["", "start", "daemon"], default="",
                        help="count each delay from the shim binary's start run, or from its daemon")
    args = parser.parse_args()
    delays = [int(d) / 1000 for d in args.delays_ms.split(",")]
    cri = CRIClient(args.endpoint)
    print(f"{(await cri.version()).runtime_version} at {args.endpoint}", flush=True)
    before = {s.pid for s in await unmatched_shims(cri)}
    orphans_total, outcomes = 0, {}
    with tempfile.TemporaryDirectory() as logs:
        for i in range(args.attempts):
            delay = delays[i % len(delays)]
            results = await asyncio.gather(*(one_attempt(args.endpoint, f"probe-{i}-{n}", delay, logs, args.after)
                                             for n in range(args.parallel)))
            for outcome in results:
                outcomes[outcome.split(":")[0]] = outcomes.get(outcome.split(":")[0], 0) + 1
            outcome = ", ".join(sorted(set(results)))
            await asyncio.sleep(SETTLE_SECONDS)  # containerd's handler finishes its cleanup
            suspects = [s for s in await unmatched_shims(cri) if s.pid not in before]
            if suspects:  # a sandbox still being created would be listed by now
                await asyncio.sleep(SETTLE_SECONDS)
                ids = {s.id for s in await cri.list_pod_sandbox()}
                suspects = [s for s in suspects if s.id not in ids and os.path.exists(f"/proc/{s.pid}")]
            found = [describe_orphan(s, args.state_dir) for s in suspects]
            orphans_total += len(found)
            print(f"attempt {i:3} delay {int(delay * 1000):5} ms: {outcome[:400]}; orphans {json.dumps(found)}",
                  flush=True)
            for s in suspects:
                remove_orphan(s, args.state_dir)
            for _ in range(20):
                try:
                    await remove_probe_sandboxes(cri)
                    break
                except errors.CRIError:
                    await asyncio.sleep(0.5)
    await cri.close()
    print(f"SUMMARY attempts {args.attempts} x {args.parallel} calls, orphans {orphans_total} outcomes {outcomes} "
          f"at {time.strftime('%H:%M:%S')}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
