"""Reading a container's log file in the CRI format, as `kubectl logs` shows it.

Each line of the file is `<RFC3339Nano time> <stdout|stderr> <P|F>[:tags] <content>`. A `P`
(partial) line is a piece of a long line: its newline is dropped so the pieces join again.
Options: `since` drops older lines, `timestamps` prefixes each logical line with its time,
`tail_lines` starts that many lines before the end (found by scanning the file backwards),
`limit_bytes` caps what is written (prefixes included; the line that reaches it is cut).
Memory stays bounded whatever the file's size: it is read in chunks, never as a whole.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import datetime, timezone

from pykubelet.util.log import get_logger

log = get_logger(__name__)

CHUNK = 256 * 1024
OUT_CHUNK = 64 * 1024
MAX_LINE = 16 * 1024 * 1024  # containerd splits longer lines into P pieces; this only guards a broken file

# Without `since` or `timestamps` every line only loses its prefix (and a P piece its newline): one
# regular-expression substitution over a whole chunk does that in C, several times faster than a
# Python loop over lines. Lines that are not CRI lines match the last branch and are dropped.
_FAST = re.compile(rb"^[^ \n]+ (?:stdout|stderr) F[^ \n]*(?: ([^\n]*))?(\n)"
                   rb"|^[^ \n]+ (?:stdout|stderr) P[^ \n]*(?: ([^\n]*))?\n"
                   rb"|^[^\n]*\n", re.MULTILINE)
# The common chunk: containerd's fixed-width UTC times and only full lines, so every prefix is the
# same 40 bytes ("<30-byte time> stdout F "); slicing them off is twice as fast again. A chunk with
# any other line takes _FAST.
_PREFIX_LENGTH = 40
_FULL_LINE_MARKS = (b" stdout F ", b" stderr F ")


class InvalidLogOptions(ValueError):
    """A query the kubelet refuses: status and body are its answer."""

    def __init__(self, status: int, body: str):
        super().__init__(body)
        self.status, self.body = status, body


@dataclass
class LogOptions:
    """The v1 PodLogOptions the kubelet reads from the query."""

    follow: bool = False
    previous: bool = False
    timestamps: bool = False
    since: float | None = None
    """Unix time: lines older than this are left out (from sinceSeconds or sinceTime)."""
    tail_lines: int | None = None
    limit_bytes: int | None = None


def _bool(value: str) -> bool:
    if value.lower() in ("true", "1"):
        return True
    if value.lower() in ("false", "0", ""):
        return False
    raise ValueError(value)


def parse_options(query: dict[str, str], now: float) -> LogOptions:
    """LogOptions from the query, or InvalidLogOptions: 400 when a value cannot be read, 422 when
    the values cannot go together (as the kubelet's decode and validation steps answer)."""
    query = dict(query)
    tail = query.pop("tail", None)  # the legacy spelling; "all" means no limit
    if tail is not None:
        query.pop("tailLines", None)
        if tail != "all":
            query["tailLines"] = tail
    try:
        options = LogOptions(follow=_bool(query.get("follow", "")), previous=_bool(query.get("previous", "")),
                             timestamps=_bool(query.get("timestamps", "")))
        tail_lines = int(query["tailLines"]) if "tailLines" in query else None
        limit_bytes = int(query["limitBytes"]) if "limitBytes" in query else None
        since_seconds = int(query["sinceSeconds"]) if "sinceSeconds" in query else None
        since_time = (datetime.fromisoformat(query["sinceTime"]).timestamp() if "sinceTime" in query else None)
    except ValueError:
        raise InvalidLogOptions(400, '{"message": "Unable to decode query."}') from None
    if ((tail_lines is not None and tail_lines < 0) or (limit_bytes is not None and limit_bytes < 1)
            or (since_seconds is not None and since_time is not None)
            or (since_seconds is not None and since_seconds < 1) or query.get("stream", "All") != "All"):
        raise InvalidLogOptions(422, '{"message": "Invalid request."}')
    options.tail_lines, options.limit_bytes = tail_lines, limit_bytes
    if since_seconds is not None:
        options.since = now - since_seconds
    elif since_time is not None:
        options.since = since_time
    return options


@dataclass
class LogLine:
    timestamp: bytes
    stream: bytes
    partial: bool
    content: bytes
    """Without its newline."""


def parse_line(line: bytes) -> LogLine | None:
    """One CRI log line (without its newline), or None if it is not one."""
    parts = line.split(b" ", 3)
    if len(parts) < 3 or parts[1] not in (b"stdout", b"stderr"):
        return None
    content = parts[3] if len(parts) == 4 else b""
    return LogLine(parts[0], parts[1], parts[2].split(b":", 1)[0] == b"P", content)


def line_time(timestamp: bytes) -> float | None:
    try:
        return datetime.fromisoformat(timestamp.decode()).timestamp()
    except ValueError:
        return None


def output_timestamp(timestamp: bytes) -> bytes:
    """Fixed-width RFC3339 with nanoseconds, as the kubelet prints it (containerd already writes it so)."""
    if len(timestamp) == 30 and timestamp.endswith(b"Z"):
        return timestamp
    try:
        text = timestamp.decode()
        when = datetime.fromisoformat(text)
    except ValueError:
        return timestamp
    fraction = text.split(".", 1)[1] if "." in text else ""
    digits = fraction[:len(fraction) - len(fraction.lstrip("0123456789"))].ljust(9, "0")[:9]
    offset = when.strftime("%z")
    zone = "Z" if offset in ("+0000", "") else f"{offset[:3]}:{offset[3:]}"
    return f"{when.strftime('%Y-%m-%dT%H:%M:%S')}.{digits}{zone}".encode()


def tail_offset(f, lines: int) -> int:
    """Where the last `lines` lines of the open file start, scanning backwards in chunks."""
    end = f.seek(0, os.SEEK_END)
    if lines == 0:
        return end
    position, newlines = end, 0
    # The last line ends with a newline: it does not start a line, so skip it.
    f.seek(max(end - 1, 0))
    if end and f.read(1) == b"\n":
        position -= 1
    while position > 0:
        size = min(CHUNK, position)
        f.seek(position - size)
        block = f.read(size)
        index = len(block)
        while True:
            index = block.rfind(b"\n", 0, index)
            if index < 0:
                break
            newlines += 1
            if newlines == lines:
                return position - size + index + 1
        position -= size
    return 0


class LogReader:
    """Turns a CRI log file into what the user sees, one bounded chunk at a time (blocking I/O:
    callers run read() in a thread)."""

    def __init__(self, path: str, options: LogOptions):
        self.path = path
        self.options = options
        self.budget = options.limit_bytes
        self.done = False
        self._pending = b""  # an incomplete last line: completed by a later read
        self._line_start = True  # the next content starts a logical line (no P piece before it)
        self._file = open(path, "rb")
        self._next = None  # the file the path names after a rotation, read once the old one ends
        if options.tail_lines is not None:
            self._file.seek(tail_offset(self._file, options.tail_lines))

    def close(self) -> None:
        self._file.close()
        if self._next is not None:
            self._next.close()

    def rotated(self) -> bool:
        """The path now names another file (the log was rotated and the runtime reopened it)."""
        try:
            now, ours = os.stat(self.path), os.fstat(self._file.fileno())
        except OSError:
            return False  # renamed, not reopened yet: the runtime still writes to our file
        return (now.st_dev, now.st_ino) != (ours.st_dev, ours.st_ino)

    def follow_rotation(self) -> bool:
        """Following, at the end of the file: when the path names a new file (the log was rotated
        and the runtime reopened it), open that one; read() finishes the old file (the runtime
        writes no more to it), then goes on with the new one from its start. True when it did."""
        if self._next is not None or not self.rotated():
            return False
        try:
            self._next = open(self.path, "rb")
        except FileNotFoundError:
            return False  # rotated again meanwhile: the next check finds the newest
        return True

    def read(self) -> tuple[bytes, bool]:
        """(output, at end of file). `done` turns True once limit_bytes is reached."""
        out = bytearray()
        while len(out) < OUT_CHUNK and not self.done:
            data = self._file.read(CHUNK)
            if not data and self._next is not None:
                self._file.close()
                self._file, self._next, self._pending = self._next, None, b""
                continue
            if not data:
                return bytes(out), True
            data = self._pending + data
            cut = data.rfind(b"\n") + 1
            if cut == 0 and len(data) < MAX_LINE:
                self._pending = data
                continue
            lines, self._pending = (data[:cut], data[cut:]) if cut else (data + b"\n", b"")
            if self.options.since is None and not self.options.timestamps:
                self._emit_fast(lines, out)
                continue
            for line in lines.split(b"\n")[:-1]:
                self._emit(line, out)
                if self.done:
                    break
        return bytes(out), False

    def _emit_fast(self, lines: bytes, out: bytearray) -> None:
        parts = lines.split(b"\n")
        parts.pop()  # after the last newline
        if all(p[30:_PREFIX_LENGTH] in _FULL_LINE_MARKS for p in parts):
            piece = b"\n".join([p[_PREFIX_LENGTH:] for p in parts]) + b"\n"
        else:
            piece = _FAST.sub(rb"\1\2\3", lines)
        if self.budget is not None:
            if len(piece) >= self.budget:
                piece, self.done = piece[:self.budget], True
            self.budget -= len(piece)
        out += piece

    def _emit(self, raw: bytes, out: bytearray) -> None:
        line = parse_line(raw)
        if line is None:
            log.debug("Skipping a log line that is not in the CRI format", path=self.path)
            return
        options = self.options
        if options.since is not None:
            when = line_time(line.timestamp)
            if when is not None and when < options.since:
                return
        piece = line.content if line.partial else line.content + b"\n"
        if options.timestamps and self._line_start:
            piece = output_timestamp(line.timestamp) + b" " + piece
        self._line_start = not line.partial
        if self.budget is not None:
            if len(piece) >= self.budget:
                piece, self.done = piece[:self.budget], True
            self.budget -= len(piece)
        out += piece


def now_utc() -> float:
    return datetime.now(timezone.utc).timestamp()
