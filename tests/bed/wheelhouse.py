#!/usr/bin/env python3
"""The wheels `make install` needs offline: pykubelet's (from this source tree) and its
dependencies', in one directory (/var/cache/pykubelet/wheels).

The install test and the VM images install from it with PYKUBELET_WHEELS, so neither waits on
the package index, and a VM that runs ~19x slower than the host never builds anything. The
dependencies are downloaded once (pip skips what the directory holds); pykubelet's wheel is
built again each time, from the tree as it is.

Usage: wheelhouse.py [--dir DIR]   (prints the directory)
"""

from __future__ import annotations

import argparse
import fcntl
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT = Path(os.environ.get("PYKUBELET_CACHE", "/var/cache/pykubelet")) / "wheels"


def build(directory: Path = DEFAULT) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for old in directory.glob("pykubelet-*.whl"):
            old.unlink()
        print(f"wheelhouse: pykubelet and its dependencies into {directory}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--wheel-dir", str(directory),
                        "--find-links", str(directory), str(REPO)], check=True, cwd=REPO)
    return directory


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=DEFAULT)
    print(build(parser.parse_args().dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
