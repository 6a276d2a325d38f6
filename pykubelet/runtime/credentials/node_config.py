"""The node's own registry credentials, as the kubelet finds them: the first readable docker
`config.json` in the root dir (--root-dir), the working directory, $HOME/.docker and /.docker;
without one, the first legacy `.dockercfg` in the root dir, the working directory, $HOME and /.
Read off the event loop at most every 5 minutes (the kubelet's cache lifetime); a file that
cannot be read or parsed is passed over, as the kubelet passes over it.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any, Callable

from pykubelet.runtime.credentials.docker_config import Credential, DockerConfigError, registry_entries
from pykubelet.util import yamlfile
from pykubelet.util.log import get_logger

log = get_logger(__name__)

CACHE_SECONDS = 300.0
Entries = list[tuple[str, Credential]]


def _auths(doc: Any) -> Any:
    """config.json's "auths" (its name in any case, as Go's JSON decoding reads it)."""
    if not isinstance(doc, dict):
        raise DockerConfigError("must be an object")
    found = [value for key, value in doc.items() if key.lower() == "auths"]
    return found[-1] if found else None


def candidates(root_dir: str) -> list[tuple[str, bool]]:
    """(path, is config.json) in the kubelet's search order."""
    home = os.path.expanduser("~")
    json_dirs = (root_dir, os.getcwd(), os.path.join(home, ".docker"), "/.docker")
    legacy_dirs = (root_dir, os.getcwd(), home, "/")
    return ([(os.path.abspath(os.path.join(d, "config.json")), True) for d in json_dirs] +
            [(os.path.abspath(os.path.join(d, ".dockercfg")), False) for d in legacy_dirs])


def read_node_entries(root_dir: str) -> Entries:
    """The entries of the first usable file, or none. Blocking."""
    for path, is_json in candidates(root_dir):
        try:
            doc = json.loads(yamlfile.read_bytes(path))
            source = f'node file "{path}"'
            return registry_entries(_auths(doc) if is_json else doc, path, source)
        except FileNotFoundError:
            continue
        except (OSError, ValueError, DockerConfigError) as e:  # DockerConfigError is a ValueError
            log.debug("Skipping a docker config file that cannot be read", path=path, err=str(e))
    return []


class NodeDockerConfig:
    def __init__(self, root_dir: str, clock: Callable[[], float] = time.monotonic):
        self.root_dir, self.clock = root_dir, clock
        self._entries: Entries = []
        self._expires = float("-inf")

    async def entries(self) -> Entries:
        if self.clock() >= self._expires:
            self._entries = await asyncio.to_thread(read_node_entries, self.root_dir)
            self._expires = self.clock() + CACHE_SECONDS
        return self._entries
