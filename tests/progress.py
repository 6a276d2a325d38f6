"""Progress lines that reach the terminal while pytest captures output.

A fixture that boots a VM or runs the conformance specs waits for minutes; under pytest's
capture its messages would appear only if it failed, and the run would look hung. `say` writes
past the capture when pytest runs (tests/conftest.py hands it the session's config) and to
stderr otherwise (the same code under `make conformance` or a benchmark).
"""

from __future__ import annotations

import sys
from typing import Any

_config: Any = None


def attach(config: Any) -> None:
    global _config
    _config = config


def say(tag: str, message: str) -> None:
    line = f"[{tag}] {message}"
    capture = _config.pluginmanager.getplugin("capturemanager") if _config is not None else None
    if capture is None:
        print(line, file=sys.stderr, flush=True)
        return
    with capture.global_and_fixture_disabled():
        print(f"\n{line}", file=sys.stderr, flush=True)
