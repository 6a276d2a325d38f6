#!/usr/bin/env python3
"""runc, for dockerd, minus the capabilities this machine cannot grant.

dockerd 20.10 gives a privileged container (and `docker exec --privileged`) every capability the
kernel knows, whether or not dockerd itself holds it. Where dockerd runs with a bounding set that
lacks one (this machine's lacks CAP_SYS_RESOURCE), runc then refuses to start the process
("unable to apply caps: operation not permitted"), and kind, whose nodes are privileged
containers, cannot start a node. docker.sh makes this dockerd's runtime: before `create`/`run` it
drops those capabilities from the bundle's config.json, before `exec` from the process file,
then runs the real runc with the same arguments. Where the bounding set is full it changes
nothing. (containerd's CRI does the same for privileged pods: they get the capabilities its own
process holds.)
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

# linux/capability.h, by number.
CAPABILITIES = [
    "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
    "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK", "CAP_IPC_OWNER", "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE", "CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT",
    "CAP_SYS_NICE", "CAP_SYS_RESOURCE", "CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE",
    "CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL", "CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG",
    "CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF", "CAP_CHECKPOINT_RESTORE",
]
# runc's global options that take a value (the command comes after them).
GLOBAL_WITH_VALUE = {"--root", "--log", "--log-format", "--criu", "--rootless"}
REAL_RUNC = os.environ.get("PYKUBELET_REAL_RUNC", "runc")


def missing_capabilities(status: str) -> set[str]:
    """The capabilities the kernel knows that the bounding set in /proc/self/status's text lacks."""
    bounding = next(int(line.split()[1], 16) for line in status.splitlines() if line.startswith("CapBnd:"))
    return {name for bit, name in enumerate(CAPABILITIES) if not bounding >> bit & 1}


def command_and_file(args: list[str]) -> tuple[str, Path | None]:
    """runc's command in ARGS and the JSON file holding the process it starts, if any."""
    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 1 if "=" in args[i] or args[i] not in GLOBAL_WITH_VALUE else 2
    if i >= len(args):
        return "", None
    command, rest = args[i], args[i + 1:]
    option = {"create": ("--bundle", "-b"), "run": ("--bundle", "-b"), "exec": ("--process", "-p")}.get(command)
    if option is None:
        return command, None
    value = None
    for j, arg in enumerate(rest):
        if arg in option and j + 1 < len(rest):
            value = rest[j + 1]
        elif arg.startswith(option[0] + "="):
            value = arg.split("=", 1)[1]
    if command == "exec":
        return command, Path(value) if value else None
    return command, Path(value or ".") / "config.json"


def without(capabilities: dict, drop: set[str]) -> dict:
    return {kind: [c for c in names if c not in drop] for kind, names in capabilities.items()}


def strip_file(path: Path, drop: set[str]) -> None:
    spec = json.loads(path.read_text())
    process = spec.get("process", spec)  # config.json holds it under "process"; exec's file is one
    if process.get("capabilities"):
        process["capabilities"] = without(process["capabilities"], drop)
        path.write_text(json.dumps(spec))


def main() -> None:
    args = sys.argv[1:]
    drop = missing_capabilities(Path("/proc/self/status").read_text())
    if drop:
        _, path = command_and_file(args)
        if path is not None and path.is_file():
            strip_file(path, drop)
    os.execvp(REAL_RUNC, [REAL_RUNC, *args])


if __name__ == "__main__":
    main()
