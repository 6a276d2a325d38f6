"""containerd's shims on the machine, and which of them serve nothing their containerd knows.

containerd runs one `containerd-shim-runc-v2` per sandbox (a pod's containers join their
sandbox's shim). The shim's command line names what it serves (`-id`), the containerd it
belongs to (`-address`, that containerd's socket) and that containerd's namespace (`-namespace`;
the CRI plugin's is k8s.io). A shim whose ID no sandbox or container of its own containerd has
serves nothing, and nobody will ever stop it.

containerd itself can leave such a shim: when a RunPodSandbox is cancelled (its caller killed
or timed out) while the shim binary is being started, containerd kills the starting process,
but the shim daemon it had already forked keeps running; containerd then deletes the sandbox's
bundle and container record, so it never learns of that shim again, restarts included.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from pykubelet.tools.leak_checks import Alive, Leak

SHIM = "containerd-shim-runc-v2"
CRI_NAMESPACE = "k8s.io"
# The shim's flags that take a value (Go flag syntax: "-id X" or "-id=X"); others are switches.
VALUE_FLAGS = frozenset({"namespace", "id", "address", "bundle", "publish-binary"})


@dataclass(frozen=True)
class Shim:
    pid: int
    id: str
    """The sandbox (or lone container) it serves."""
    address: str
    """The socket of the containerd it belongs to."""
    namespace: str

    def describe(self) -> str:
        return f"pid {self.pid} (of the containerd at {self.address}, namespace {self.namespace or '?'})"


def parse_shim(pid: int, argv: list[str]) -> Shim | None:
    """The shim daemon a command line runs; None for any other program, and for containerd's
    short-lived `start` and `delete` runs of the shim binary (they end on their own)."""
    if not argv or os.path.basename(argv[0]) != SHIM:
        return None
    flags: dict[str, str] = {}
    args = iter(argv[1:])
    for arg in args:
        if not arg:
            continue  # /proc's cmdline ends with a NUL
        if not arg.startswith("-"):
            return None  # an action: start or delete
        name, has_value, value = arg.lstrip("-").partition("=")
        if has_value:
            flags[name] = value
        elif name in VALUE_FLAGS:
            flags[name] = next(args, "")
    if not flags.get("id") or not flags.get("address"):
        return None
    return Shim(pid, flags["id"], flags["address"], flags.get("namespace", ""))


def running_shims(proc: str = "/proc", root: str = "/") -> list[Shim]:
    """Every shim daemon on the machine whose root directory is the machine's (reads /proc: call
    off the event loop). A shim under another root runs inside a container, of the containerd in
    there (a kind node's): its -address names a socket of that container's filesystem, which may
    have the same path as a socket of ours (/run/containerd/containerd.sock)."""
    ours = _identity(root)
    shims = []
    for pid in filter(str.isdigit, os.listdir(proc)):
        try:
            with open(os.path.join(proc, pid, "cmdline"), "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
            shim = parse_shim(int(pid), argv)
            if shim and _identity(os.path.join(proc, pid, "root")) == ours:
                shims.append(shim)
        except OSError:
            continue  # gone meanwhile
    return sorted(shims, key=lambda s: s.pid)


def _identity(directory: str) -> tuple[int, int]:
    """Which directory it is, whatever path reaches it (/proc/PID/root leads to the process's root)."""
    st = os.stat(directory)
    return st.st_dev, st.st_ino


def socket_of(endpoint: str) -> str:
    """The socket path of a CRI endpoint, as a shim's -address would name the same containerd."""
    return os.path.realpath(endpoint.removeprefix("unix://"))


def orphan_shims(shims: list[Shim], alive: Alive, judged: set[str]) -> list[Leak]:
    """The shims nobody will stop: those whose containerd is gone (any containerd), and, for the
    containerds in `judged` (sockets, as socket_of gives them), those whose containerd does not
    answer or, in the CRI namespace, has no sandbox or container with the shim's ID.

    Other live containerds' shims are left alone: they may be starting a sandbox of a pod that
    another agent is creating right now, which CRI lists only once it has started.
    """
    out = []
    for shim in shims:
        socket = os.path.realpath(shim.address)
        if not os.path.exists(socket):
            out.append(Leak("shim", f"{shim.describe()}: that containerd is gone", shim.id))
        elif socket not in judged:
            continue
        elif socket not in alive.ids_by_socket:
            out.append(Leak("shim", f"{shim.describe()}: that containerd does not answer", shim.id))
        elif shim.namespace == CRI_NAMESPACE and shim.id not in alive.ids_by_socket[socket]:
            out.append(Leak("shim", f"{shim.describe()}: no sandbox or container of that containerd has "
                            f"its id", shim.id))
    return out
