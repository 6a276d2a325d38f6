"""Which CNI config the runtime uses, and whether another network's config has taken the node
over from the agent (docs/network.md, "A CNI DaemonSet on an agent-mode node").

containerd (1.6, max_conf_num = 1) loads one network from its conf dir: of the entries that are
not directories and whose extension is .conf, .conflist or .json, the first by name in byte
order. It never falls back to a later file, even when that first one does not load (the node
then has no pod network at all), so the first file is in charge whatever it holds. A CNI
DaemonSet's 10-flannel.conflist sorts before the agent's 10-pykubelet.conflist and so takes new
pods away from the agent without a word from containerd.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from pykubelet.cni.config import config_files
from pykubelet.config import NetworkSettings
from pykubelet.network.assets import CONFLIST_NAME

@dataclass(frozen=True)
class RuntimeConfig:
    """A CNI conf dir as containerd sees it."""

    conf_dir: str
    files: tuple[str, ...]
    """Its config files, in the order containerd reads them."""

    @property
    def in_charge(self) -> str:
        """The file containerd uses; "" when there is none."""
        return self.files[0] if self.files else ""

    @property
    def path(self) -> str:
        return os.path.join(self.conf_dir, self.in_charge) if self.files else ""

    @property
    def unused(self) -> tuple[str, ...]:
        return self.files[1:]

    @property
    def agents(self) -> bool:
        """Whether the file in charge is the one the agent writes."""
        return self.in_charge == CONFLIST_NAME


def read_runtime_config(conf_dir: str) -> RuntimeConfig:
    """The conf dir as it is now (blocking: run it off the event loop). A missing dir has no
    config, as for containerd; one that cannot be read raises OSError."""
    try:
        with os.scandir(conf_dir) as entries:
            # is_dir without following links: containerd skips directories, not links to them.
            names = [e.name for e in entries if not e.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        names = []
    return RuntimeConfig(conf_dir, config_files(names))


@dataclass(frozen=True)
class Conflict:
    """Another network's config is in charge of a node whose network the agent owns."""

    path: str
    """The foreign file containerd uses."""
    fix: str

    def __str__(self) -> str:
        return (f"another network's CNI config {self.path} is the one containerd uses (it sorts before the "
                f"agent's {CONFLIST_NAME}): new pods would get a network the agent neither tracks nor routes")


def conflict(config: RuntimeConfig, network: NetworkSettings) -> Conflict | None:
    """The conflict, when the agent writes the node's config (agent mode, or runtime mode with
    --cni-write-config) but another file is in charge; None when there is none. In runtime mode
    without --cni-write-config a DaemonSet's config in charge is the healthy case."""
    writes_config = network.mode == "agent" or network.write_runtime_config
    if not writes_config or not config.files or config.agents:
        return None
    run_as = "with --network-mode runtime" if network.mode == "agent" else "without --cni-write-config"
    fix = (f"if a CNI DaemonSet owns this node's network, run the agent {run_as}; to keep the agent's "
           f"network, remove {config.path} (and the DaemonSet from this node)")
    return Conflict(config.path, fix)
