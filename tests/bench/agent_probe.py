"""pykubelet run as `python -m pykubelet.cli`, with a memory probe for the benchmarks: where the
agent's own memory goes, from inside the process (no debugger).

    python -m tests.bench.agent_probe <pykubelet's arguments>

On SIGUSR1 it writes $PYKUBELET_PROBE_DIR/<n>.json: RSS and its anonymous part, glibc malloc's
bytes in use and free but held (all arenas), the threads, the objects per type, and with
PYKUBELET_PROBE_TRACE=1 (tracemalloc on from the start, which slows the agent and inflates its
RSS) the traced bytes per file and per line. On SIGUSR2 it calls malloc_trim(0) and writes the
same, so a run shows how much of the RSS is the heap's free space. Bench-only: the agent itself
has no such hook.
"""

from __future__ import annotations

import collections
import ctypes
import gc
import itertools
import json
import os
import runpy
import signal
import sys
import threading
import tracemalloc
from xml.etree import ElementTree


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                      "fsmblks", "uordblks", "fordblks", "keepcost")]


LIBC = ctypes.CDLL(None)
LIBC.mallinfo2.restype = _Mallinfo2
LIBC.open_memstream.restype = ctypes.c_void_p
LIBC.open_memstream.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_size_t)]
LIBC.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
LIBC.fclose.argtypes = [ctypes.c_void_p]
_count = itertools.count(1)


def _status() -> dict[str, float]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[key + "_mib"] = int(value.split()[0]) / 1024
    return out


def arenas() -> list[dict[str, int]]:
    """Each malloc arena (the main one, then one per thread that allocated under contention): its
    bytes mapped and its free bytes, from malloc_info's XML."""
    buf, size = ctypes.c_char_p(), ctypes.c_size_t()
    stream = LIBC.open_memstream(ctypes.byref(buf), ctypes.byref(size))
    LIBC.malloc_info(0, stream)
    LIBC.fclose(stream)
    root = ElementTree.fromstring(ctypes.string_at(buf, size.value))
    LIBC.free(buf)
    out = []
    for heap in root.iter("heap"):
        total = {t.get("type"): int(t.get("size")) for t in heap.iter("total") if t.get("type") in ("fast", "rest")}
        system = {s.get("type"): int(s.get("size")) for s in heap.iter("system")}
        out.append({"mapped": system.get("current", 0), "free": sum(total.values())})
    return out


def report(trimmed: bool) -> dict:
    info = LIBC.mallinfo2()
    out = {"trimmed": trimmed, **_status(), "malloc_in_use_mib": info.uordblks / 2**20,
           "malloc_free_held_mib": info.fordblks / 2**20, "malloc_mmapped_mib": info.hblkhd / 2**20,
           "threads": [t.name for t in threading.enumerate()], "arenas": arenas(),
           "objects": collections.Counter(type(o).__qualname__ for o in gc.get_objects()).most_common(40)}
    if tracemalloc.is_tracing():
        snapshot = tracemalloc.take_snapshot()
        out["traced_mib"] = tracemalloc.get_traced_memory()[0] / 2**20
        out["by_file"] = [(s.traceback[0].filename, s.size) for s in snapshot.statistics("filename")[:40]]
        out["by_line"] = [(f"{s.traceback[0].filename}:{s.traceback[0].lineno}", s.size)
                          for s in snapshot.statistics("lineno")[:60]]
    return out


def _write(trimmed: bool) -> None:
    if trimmed:
        LIBC.malloc_trim(0)
    path = os.path.join(os.environ["PYKUBELET_PROBE_DIR"], f"{next(_count)}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(report(trimmed), f)
    os.rename(path + ".tmp", path)


def main() -> None:
    if os.environ.get("PYKUBELET_PROBE_TRACE") == "1":
        tracemalloc.start(1)
    signal.signal(signal.SIGUSR1, lambda *_: _write(False))
    signal.signal(signal.SIGUSR2, lambda *_: _write(True))
    sys.argv = ["pykubelet", *sys.argv[1:]]
    runpy.run_module("pykubelet.cli", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
