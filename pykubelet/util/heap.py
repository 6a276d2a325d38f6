"""The C heap's free pages handed back to the kernel once a minute, as Go's runtime does for the kubelet.

What Python frees outside pymalloc's own arenas (blocks over 512 bytes: the tables of large dicts
and lists, strings and bytes, protobuf, gRPC and TLS buffers) goes back to glibc's malloc, which
returns to the kernel only free memory at the top of a heap or in a block it mapped on its own.
After a burst (a hundred pods started at once, their status writes and Events over as many
connections) the rest stays resident though unused, and the agent's RSS keeps its peak.
malloc_trim(0) releases every free page of every arena; it takes milliseconds and holds the
arenas' locks meanwhile, so it runs in a thread. A C library without it (musl) has nothing to do.
"""

from __future__ import annotations

import asyncio
import ctypes
from typing import Callable

TRIM_EVERY_SECONDS = 60.0

Trim = Callable[[int], int]


def malloc_trim() -> Trim | None:
    """glibc's malloc_trim, or None where the C library has none."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


async def give_back_free_memory(every: float = TRIM_EVERY_SECONDS, trim: Trim | None = None) -> None:
    """A loop of the agent's (it never ends): every `every` seconds, the heap's free pages go back."""
    trim = trim or malloc_trim()
    while True:
        await asyncio.sleep(every)
        if trim is not None:
            await asyncio.to_thread(trim, 0)
