#!/usr/bin/env python3
"""The init system of a kubeadm test node: a `systemctl` that kubeadm finds first on its PATH.

This machine has no systemd as PID 1, and kubeadm drives the kubelet through `systemctl`
(daemon-reload, restart, stop, is-active, is-enabled, status). This stands in for it with what
kubeadm relies on, for the one unit it manages: kubelet.service as the deb/rpm packages install
it, with kubeadm's drop-in:

    ExecStart=kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
    KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf
                            --kubeconfig=/etc/kubernetes/kubelet.conf
    KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml
    EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env     (KUBELET_KUBEADM_ARGS, written by kubeadm)
    EnvironmentFile=-/etc/default/kubelet                   (KUBELET_EXTRA_ARGS, the admin's)
    Restart=always, RestartSec (10 s in the package; RESTART_SECONDS here)

`start`/`restart` launch a supervisor (its own session, so it outlives kubeadm) that runs the
kubelet and restarts it when it exits; `stop` ends both (SIGTERM, SIGKILL after 90 s as
systemd's default TimeoutStopSec). Every other unit is inactive. The kubelet's output goes to
<PKL_INIT_DIR>/kubelet.log, one "--- start N at <unix time>: <argv> ---" line per start. `kubelet` is whatever the
node's PATH finds (pykubelet, or the real kubelet for the benchmark).

Environment: PKL_INIT_DIR (state: PID files, log), PKL_RESTART_SECONDS (default 2).
"""
from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

UNIT = "kubelet"
STATE = Path(os.environ.get("PKL_INIT_DIR", "/run/pkl-init"))
RESTART_SECONDS = float(os.environ.get("PKL_RESTART_SECONDS", "2"))
STOP_TIMEOUT = 90.0
ENVIRONMENT = {
    "KUBELET_KUBECONFIG_ARGS": "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf "
                               "--kubeconfig=/etc/kubernetes/kubelet.conf",
    "KUBELET_CONFIG_ARGS": "--config=/var/lib/kubelet/config.yaml",
}
ENVIRONMENT_FILES = ("/var/lib/kubelet/kubeadm-flags.env", "/etc/default/kubelet")
EXEC_START = "kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS"


def read_environment_file(path: str) -> dict[str, str]:
    """KEY=VALUE lines as systemd reads them: comments and blanks skipped, one level of quotes removed."""
    out: dict[str, str] = {}
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return out  # "-" prefix: a missing file is fine
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")) or "=" not in line:
            continue
        key, value = line.split("=", 1)
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        out[key.strip()] = value
    return out


def command_line() -> list[str]:
    """ExecStart with $VAR expanded as systemd does: split into words at whitespace."""
    env = dict(ENVIRONMENT)
    for path in ENVIRONMENT_FILES:
        env.update(read_environment_file(path))
    argv: list[str] = []
    for word in EXEC_START.split():
        argv += env.get(word[1:], "").split() if word.startswith("$") else [word]
    return argv


def _pid(name: str) -> int | None:
    try:
        pid = int((STATE / f"{name}.pid").read_text())
        os.kill(pid, 0)
        return pid
    except (FileNotFoundError, ValueError, ProcessLookupError):
        return None


def supervise() -> None:
    """Run the kubelet until told to stop; restart it RESTART_SECONDS after it exits."""
    stopping = False
    child: subprocess.Popen[bytes] | None = None

    def on_term(*_: object) -> None:
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, on_term)
    starts = 0
    while not stopping:
        starts += 1
        argv = command_line()
        with open(STATE / "kubelet.log", "ab") as log:
            log.write(f"--- start {starts} at {time.time():.3f}: {shlex.join(argv)} ---\n".encode())
            log.flush()
            child = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd="/")
        (STATE / "kubelet.pid").write_text(str(child.pid))
        deadline = None
        while child.poll() is None:
            if stopping and deadline is None:
                deadline = time.monotonic() + STOP_TIMEOUT
            if deadline is not None and time.monotonic() > deadline:
                child.kill()
            time.sleep(0.1)
        (STATE / "kubelet.pid").unlink(missing_ok=True)
        end = time.monotonic() + RESTART_SECONDS
        while not stopping and time.monotonic() < end:
            time.sleep(0.1)
    (STATE / "supervisor.pid").unlink(missing_ok=True)


def start() -> None:
    if _pid("supervisor"):
        return
    STATE.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--supervise"], start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=os.environ.copy(), cwd="/")
    (STATE / "supervisor.pid").write_text(str(proc.pid))


def stop() -> None:
    pid = _pid("supervisor")
    if pid is None:
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--supervise"]:
        supervise()
        return 0
    words = [a for a in argv if not a.startswith("-")]
    if not words:
        return 0
    verb, units = words[0], [u.removesuffix(".service") for u in words[1:]]
    ours = UNIT in units
    if verb in ("daemon-reload", "enable", "disable", "reset-failed"):
        return 0
    if verb in ("start", "restart") and ours:
        if verb == "restart":
            stop()
        start()
        return 0
    if verb == "stop":
        if ours:
            stop()
        return 0
    if verb == "is-active":
        active = ours and _pid("supervisor") is not None
        print("active" if active else "inactive")
        return 0 if active else 3
    if verb == "is-enabled":
        print("enabled" if ours else "disabled")
        return 0 if ours else 1
    if verb == "status":
        if not ours:
            print(f"Unit {units[0] if units else ''}.service could not be found.")  # kubeadm looks for this
            return 4
        active = _pid("supervisor") is not None
        print(f"kubelet.service - kubelet: The Kubernetes Node Agent\n     Loaded: loaded\n"
              f"     Active: {'active (running)' if active else 'inactive (dead)'}")
        return 0 if active else 3
    print(f"systemctl (pykubelet test init system): {verb} is not supported", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
