#!/usr/bin/env python3
"""`make run` as a newcomer runs it, checked: the README's first command brings up the example
pods of manifests/.

Starts `make run` (its setup included) in a session of its own, waits until every pod of
manifests/ is Running as `pykubelet pods` shows it, and prints how long the first and the last
took. Then Ctrl-C, as the user would: the pods keep running, so they are removed the way a user
removes them, by the next agent of the node started without their manifests, which stops and
cleans them up. A root dir that did not exist before is removed again.

Usage: make_run_check.py [--venv DIR] [--timeout SECONDS]   (from fresh-check.sh)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
ROOT_DIR = Path("/var/lib/kubelet")  # the agent's default, which `make run` keeps
STOP_SECONDS = 60


def say(message: str) -> None:
    print(f"[make-run-check {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def manifest_pods() -> set[str]:
    """The metadata.name of every pod in manifests/ (the agent names each <name>-<node>)."""
    names = set()
    for path in sorted((REPO / "manifests").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "Pod":
                names.add(doc["metadata"]["name"])
    if not names:
        raise SystemExit("make_run_check: manifests/ has no pod")
    return names


def pods_phases(pykubelet: str) -> dict[str, str] | None:
    """{pod name: phase} as `pykubelet pods -o json` shows it; None while the agent does not answer."""
    result = subprocess.run([pykubelet, "pods", "-o", "json"], capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        return None
    return {p["metadata"]["name"]: p.get("status", {}).get("phase", "") for p in json.loads(result.stdout)["items"]}


def of_manifest(pod_name: str, manifests: set[str]) -> str | None:
    return next((m for m in manifests if pod_name.startswith(f"{m}-")), None)


def stop(process: subprocess.Popen, what: str) -> None:
    """Ctrl-C to the whole session (make and the agent under it); SIGKILL if it outstays."""
    os.killpg(process.pid, signal.SIGINT)
    try:
        process.wait(STOP_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise SystemExit(f"make_run_check: {what} did not stop within {STOP_SECONDS}s of Ctrl-C")


async def sandboxes_named(prefixes: set[str]) -> list[str]:
    from pykubelet.cri.client import CRIClient

    async with CRIClient("unix:///run/containerd/containerd.sock") as cri:
        return [s.metadata.name for s in await cri.list_pod_sandbox()
                if any(s.metadata.name.startswith(f"{p}-") for p in prefixes)]


def remove_the_pods(pykubelet: str, manifests: set[str], timeout: float, log: Path) -> None:
    """Start the node's next agent with an empty manifest directory: it stops and removes the
    static pods whose files are gone, as after `rm manifests/*.yaml`."""
    with tempfile.TemporaryDirectory(prefix="pkl-make-run-") as empty, open(log, "ab") as out:
        agent = subprocess.Popen([pykubelet, "--pod-manifest-path", empty], stdout=out, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            deadline = time.monotonic() + timeout
            while left := asyncio.run(sandboxes_named(manifests)):
                if agent.poll() is not None:
                    raise SystemExit(f"make_run_check: the cleaning agent exited ({agent.returncode}); see {log}")
                if time.monotonic() > deadline:
                    raise SystemExit(f"make_run_check: sandboxes {left} still there {timeout:.0f}s after the "
                                     f"next agent started without their manifests; see {log}")
                time.sleep(1)
        finally:
            stop(agent, "the cleaning agent")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", default=str(REPO / ".venv"))
    parser.add_argument("--timeout", type=float, default=1800, help="for the pods to run (default %(default)s s: "
                        "`make run` on a new machine installs packages and builds the images first)")
    args = parser.parse_args()
    pykubelet = str(Path(args.venv) / "bin" / "pykubelet")
    manifests = manifest_pods()
    root_dir_was_there = ROOT_DIR.exists()
    log = Path(tempfile.mkstemp(prefix="pkl-make-run-", suffix=".log")[1])
    say(f"make run (output in {log}); waiting for {sorted(manifests)} to be Running")
    t0 = time.monotonic()
    with open(log, "wb") as out:
        make = subprocess.Popen(["make", "--no-print-directory", f"VENV={args.venv}", "run"], cwd=REPO, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    running_at: dict[str, float] = {}
    last_seen: dict[str, str] | None = None
    try:
        while set(running_at) != manifests:
            if make.poll() is not None:
                raise SystemExit(f"make_run_check: make run exited ({make.returncode}) before the pods ran; "
                                 f"its output:\n{log.read_text()[-4000:]}")
            if time.monotonic() - t0 > args.timeout:
                raise SystemExit(f"make_run_check: not every pod Running after {args.timeout:.0f}s (last seen: "
                                 f"{last_seen}); see {log}")
            if os.path.exists(pykubelet) and (last_seen := pods_phases(pykubelet)) is not None:
                for name, phase in last_seen.items():
                    manifest = of_manifest(name, manifests)
                    if manifest and phase == "Running" and manifest not in running_at:
                        running_at[manifest] = time.monotonic() - t0
                        say(f"{name} Running {running_at[manifest]:.1f}s after make run started")
            time.sleep(1)
    finally:
        stop(make, "make run")
    say(f"first pod Running after {min(running_at.values()):.1f}s, all {len(manifests)} after "
        f"{max(running_at.values()):.1f}s; removing them")
    remove_the_pods(pykubelet, manifests, 120, log)
    if not root_dir_was_there:
        mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
                  if line.split()[4].startswith(f"{ROOT_DIR}/")]
        if mounts:  # never remove what a mount holds: report it as the leak it is
            raise SystemExit(f"make_run_check: mounts left under {ROOT_DIR}: {mounts}")
        shutil.rmtree(ROOT_DIR)
    log.unlink()
    say("the pods are gone")
    return 0


if __name__ == "__main__":
    sys.exit(main())
