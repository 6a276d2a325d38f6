"""key=value structured logging, the way klog prints it: a message, then the facts.

    log = get_logger(__name__)
    log.info("Started container", pod="default/web-node1", container="app")
    -> I1202 13:10:00.123 sync.py] Started container pod="default/web-node1" container="app"
"""

from __future__ import annotations

import logging
import sys
from typing import Any

_LEVEL_LETTER = {"DEBUG": "D", "INFO": "I", "WARNING": "W", "ERROR": "E", "CRITICAL": "F"}


def _format_value(value: Any) -> str:
    if isinstance(value, str):
        return '"' + value.replace('"', '\\"') + '"'
    return str(value)


class KeyValueLogger:
    """A thin wrapper over a stdlib logger that takes facts as keyword arguments."""

    def __init__(self, logger: logging.Logger):
        self._logger = logger

    def _log(self, level: int, msg: str, fields: dict[str, Any], exc_info: Any = None) -> None:
        if not self._logger.isEnabledFor(level):
            return
        if fields:
            msg = msg + " " + " ".join(f"{k}={_format_value(v)}" for k, v in fields.items())
        self._logger.log(level, msg, exc_info=exc_info, stacklevel=3)

    def debug(self, msg: str, **fields: Any) -> None:
        self._log(logging.DEBUG, msg, fields)

    def info(self, msg: str, **fields: Any) -> None:
        self._log(logging.INFO, msg, fields)

    def warning(self, msg: str, **fields: Any) -> None:
        self._log(logging.WARNING, msg, fields)

    def error(self, msg: str, exc_info: Any = None, **fields: Any) -> None:
        self._log(logging.ERROR, msg, fields, exc_info=exc_info)


def get_logger(name: str) -> KeyValueLogger:
    return KeyValueLogger(logging.getLogger(name))


class _KlogFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = self.formatTime(record, "%m%d %H:%M:%S") + f".{int(record.msecs):03d}"
        letter = _LEVEL_LETTER.get(record.levelname, "I")
        line = f"{letter}{stamp} {record.filename}:{record.lineno}] {record.getMessage()}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def setup_logging(verbosity: int) -> None:
    """--v=0 shows info and up; --v>=4 adds debug, as kubelet operators expect."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_KlogFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbosity >= 4 else logging.INFO)
    # grpc and aiohttp chatter is not ours to show at info level.
    for noisy in ("asyncio", "aiohttp.access", "pyroute2", "grpc"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
