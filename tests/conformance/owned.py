"""What a conformance run owns on this machine, and its removal: at the end of a run, and before
a run, whatever a run that was killed left behind.

A run owns its names: its data dir (WORK: the control plane's state, each node's root dir, pod
logs and IPAM), the containerd named `conformance` (containerd-node.sh, which removes its pods'
network namespaces with it), the bridge pklcf0 and its masquerade chain, and the cgroup root
/pkl-conformance. What the real kubelet makes that bears no name of ours (its iptables chains,
/var/lib/kubelet/device-plugins) is written down in WORK when it starts, if it was not there
before, so that even a killed run's can be told from someone else's.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import shutil
import signal
import subprocess
import time

from pykubelet.network.hostnet import masquerade_chain
from tests import kubelet_chains, progress
from tests.helpers import unmount_under

BED = pathlib.Path(__file__).resolve().parents[1] / "bed"
WORK = pathlib.Path(os.environ.get("PYKUBELET_CONFORMANCE_DIR", "/var/lib/pykubelet-conformance"))
CONTAINERD = "conformance"  # containerd-node.sh's name: /run/pykubelet-nodes/conformance/
STATE = pathlib.Path("/run/pykubelet-nodes") / CONTAINERD
BRIDGE = "pklcf0"
# Not the default cluster's 10.244.0.0/16: both nodes' bridges live in this network namespace.
CLUSTER_ENV = {
    "PYKUBELET_CLUSTER_DIR": str(WORK / "cluster"),
    "PYKUBELET_API_PORT": "16443", "PYKUBELET_ETCD_PORT": "12379",
    "PYKUBELET_CM_PORT": "20257", "PYKUBELET_SCHED_PORT": "20259",
    "PYKUBELET_CLUSTER_CIDR": "10.246.0.0/16",
}
# The node's pods live under a cgroup root of their own (both agents' --cgroup-root): a real
# kubelet's orphan cleanup kills what runs in the pod cgroups under its root it does not know,
# so neither this node's kubelet nor another one on this machine (a benchmark's) may share one.
NODE_CGROUP_ROOT = "/pkl-conformance"
CONTAINER_LOG_LINKS = pathlib.Path("/var/log/containers")  # the kubelet's legacy log symlinks
KUBELET_MADE = WORK / "made-by-kubelet.json"


def say(msg: str) -> None:
    progress.say("conformance", msg)


def cgroup_hierarchies(root: str = "/sys/fs/cgroup") -> list[str]:
    return [os.path.join(root, h) for h in sorted(os.listdir(root))
            if os.path.isdir(os.path.join(root, h)) and not os.path.islink(os.path.join(root, h))]


def _cgroup_tops() -> list[str]:
    return [os.path.join(h, NODE_CGROUP_ROOT.lstrip("/")) for h in cgroup_hierarchies()]


# ---------------------------------------------------------------- what the real kubelet makes
def note_what_the_kubelet_will_make(paths: list[str]) -> None:
    """Before the real kubelet starts: its chains and these paths, those not there yet."""
    KUBELET_MADE.parent.mkdir(parents=True, exist_ok=True)
    KUBELET_MADE.write_text(json.dumps({"chains": sorted(kubelet_chains.absent()),
                                        "paths": [p for p in paths if not os.path.exists(p)]}))


def remove_what_the_kubelet_made() -> None:
    """Once the kubelet has exited (a running one puts its chains back)."""
    try:
        made = json.loads(KUBELET_MADE.read_text())
    except (OSError, ValueError):
        return
    kubelet_chains.remove({tuple(chain) for chain in made["chains"]})
    for path in made["paths"]:
        shutil.rmtree(path, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(path))  # /var/lib/kubelet, if nothing else is in it
    for link in CONTAINER_LOG_LINKS.glob("*.log"):
        with contextlib.suppress(OSError):
            if os.readlink(link).startswith(str(WORK) + "/"):
                link.unlink()
    KUBELET_MADE.unlink(missing_ok=True)


# ---------------------------------------------------------------- the node's host state
def remove_node_host_state() -> None:
    """The node's containerd (with its pods), bridge, masquerade chain and cgroup root."""
    subprocess.run(["bash", str(BED / "containerd-node.sh"), "down", CONTAINERD], capture_output=True, timeout=300)
    subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True)
    _remove_masquerade()
    _remove_cgroup_root()
    remove_what_the_kubelet_made()


def _remove_masquerade() -> None:
    chain = masquerade_chain(BRIDGE)
    rules = subprocess.run(["iptables", "-w", "-t", "nat", "-S", "POSTROUTING"], capture_output=True,
                           text=True).stdout
    for rule in rules.splitlines():
        if rule.startswith("-A POSTROUTING") and rule.endswith(f"-j {chain}"):
            subprocess.run(["iptables", "-w", "-t", "nat", "-D", *rule.split()[1:]], capture_output=True)
    subprocess.run(["iptables", "-w", "-t", "nat", "-F", chain], capture_output=True)
    subprocess.run(["iptables", "-w", "-t", "nat", "-X", chain], capture_output=True)


def remove_cgroup_tree(top: str) -> None:
    """rmdir every cgroup under top, deepest first; one that still holds a process stays, and is said."""
    for dirpath, _, _ in sorted(os.walk(top), key=lambda entry: -len(entry[0])):
        try:
            os.rmdir(dirpath)
        except FileNotFoundError:
            pass
        except OSError as e:
            say(f"WARNING: cannot remove cgroup {dirpath}: {e.strerror}")


def make_cgroup_root(root: str) -> None:
    """A real kubelet's cgroupRoot, in every hierarchy: the kubelet wants it there before it starts.
    (Under the default root, "/", the kubelet kills the pods of every other agent on the machine.)"""
    for hierarchy in cgroup_hierarchies():
        if os.path.exists(os.path.join(hierarchy, "cgroup.procs")):
            os.makedirs(os.path.join(hierarchy, root.lstrip("/")), exist_ok=True)


def remove_cgroup_root(root: str) -> None:
    """Every cgroup under root, in every hierarchy (remove_cgroup_tree)."""
    for hierarchy in cgroup_hierarchies():
        remove_cgroup_tree(os.path.join(hierarchy, root.lstrip("/")))


def _remove_cgroup_root() -> None:
    """Every cgroup under the node's root."""
    remove_cgroup_root(NODE_CGROUP_ROOT)


# ---------------------------------------------------------------- a killed run's leftovers
def _processes_of_earlier_runs() -> list[int]:
    """Processes whose command line names the run's data dir (its node agent, control plane,
    ginkgo and e2e.test) or that run in the node's cgroups (its pods' containers). Only called
    under the run's lock: none of them is this run's."""
    pids = set()
    for top in _cgroup_tops():
        for dirpath, _, files in os.walk(top):
            if "cgroup.procs" in files:
                with contextlib.suppress(OSError, ValueError):
                    pids |= {int(p) for p in pathlib.Path(dirpath, "cgroup.procs").read_text().split()}
    marker = str(WORK).encode() + b"/"
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if marker in pathlib.Path("/proc", entry, "cmdline").read_bytes():
                    pids.add(int(entry))
    pids.discard(os.getpid())
    return sorted(pids)


def _kill(pids: list[int]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(os.path.exists(f"/proc/{pid}") for pid in pids):
            time.sleep(0.2)


def leftovers_of_earlier_runs() -> list[str]:
    found = []
    if WORK.exists():
        found.append(str(WORK))
    if STATE.exists() or pathlib.Path("/var/lib/pykubelet-nodes", CONTAINERD).exists():
        found.append(f"containerd {CONTAINERD}")
    if pathlib.Path("/sys/class/net", BRIDGE).exists():
        found.append(f"bridge {BRIDGE}")
    if subprocess.run(["iptables", "-w", "-t", "nat", "-S", masquerade_chain(BRIDGE)], capture_output=True).returncode == 0:
        found.append(f"nat chain {masquerade_chain(BRIDGE)}")
    if any(os.path.isdir(top) for top in _cgroup_tops()):
        found.append(f"cgroups {NODE_CGROUP_ROOT}")
    return found


def remove_leftovers_of_earlier_runs() -> None:
    """Before a run, under its lock: what a run that did not get to its end (killed) left."""
    found = leftovers_of_earlier_runs()
    if not found:
        return
    say(f"removing what an earlier run left: {', '.join(found)}")
    if (WORK / "cluster").exists():
        subprocess.run(["bash", str(BED / "cluster.sh"), "down", "--purge"], env={**os.environ, **CLUSTER_ENV},
                       capture_output=True, timeout=300)
    pids = _processes_of_earlier_runs()
    if pids:
        say(f"stopping its processes {pids}")
        _kill(pids)
    remove_node_host_state()
    if WORK.exists():
        unmount_under(str(WORK))
        shutil.rmtree(WORK, ignore_errors=True)
    still = leftovers_of_earlier_runs()
    if still:
        say(f"WARNING: could not remove: {', '.join(still)}")
