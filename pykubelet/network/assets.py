"""The files in the repository's cni/ directory: the shim containerd runs, and the conflist
templates the agent fills in with the node's values.

A source checkout has them next to the package; an installed wheel under
<prefix>/share/pykubelet/cni (pyproject's data-files).
"""

from __future__ import annotations

import json
import os
import string
import sys
from pathlib import Path
from typing import Any

from pykubelet.util import durable

SHIM_NAME = "pykubelet-cni"
CONFLIST_NAME = "10-pykubelet.conflist"  # the same file in both modes, so switching modes replaces it


def assets_dir() -> Path:
    candidates = (Path(__file__).resolve().parents[2] / "cni", Path(sys.prefix) / "share" / "pykubelet" / "cni")
    for candidate in candidates:
        if (candidate / SHIM_NAME).is_file():
            return candidate
    raise FileNotFoundError(f"pykubelet's cni/ files are missing (looked in {', '.join(map(str, candidates))})")


def render(template: str, **values: str) -> dict[str, Any]:
    """A cni/ template with ${name} placeholders in its strings filled in."""
    doc = json.loads((assets_dir() / template).read_text())

    def fill(node: Any) -> Any:
        if isinstance(node, str):
            return string.Template(node).substitute(values)
        if isinstance(node, list):
            return [fill(n) for n in node]
        if isinstance(node, dict):
            return {k: fill(v) for k, v in node.items()}
        return node
    return fill(doc)


def write_atomically(path: str, data: bytes, mode: int = 0o644) -> bool:
    """Write path by rename (readers never see half a file); False when it already held data."""
    try:
        with open(path, "rb") as f:
            if f.read() == data:
                return False
    except FileNotFoundError:
        pass
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    durable.write_file(path, data, mode)
    return True


def install_shim(bin_dirs: list[str]) -> list[str]:
    """Copy the shim into every existing CNI bin dir (containerd reads one of them); returns them."""
    shim = (assets_dir() / SHIM_NAME).read_bytes()
    installed = []
    for directory in bin_dirs:
        if os.path.isdir(directory):
            write_atomically(os.path.join(directory, SHIM_NAME), shim, 0o755)
            installed.append(directory)
    if not installed:
        raise FileNotFoundError(f"no CNI bin dir exists (looked in {', '.join(bin_dirs)})")
    return installed


def write_conflist(conf_dir: str, conflist: dict[str, Any]) -> bool:
    data = (json.dumps(conflist, indent=2) + "\n").encode()
    return write_atomically(os.path.join(conf_dir, CONFLIST_NAME), data)
