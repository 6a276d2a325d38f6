"""Waiting on conditions with deadlines: the only way tests wait."""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any, Awaitable, Callable


async def wait_for(condition: Callable[[], Any | Awaitable[Any]], timeout: float, what: str,
                   interval: float = 0.1, describe: Callable[[], str] | None = None) -> Any:
    """Poll condition until it returns something truthy; fail with `what` after timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            detail = f"\n{describe()}" if describe else ""
            raise AssertionError(f"timed out after {timeout}s waiting for {what}{detail}")
        await asyncio.sleep(interval)


def unmount_under(directory: str) -> None:
    """Unmount whatever an agent left mounted below `directory` (the tmpfs of secret,
    projected and memory emptyDir volumes of pods still running when a test stopped it)."""
    import os
    import subprocess

    prefix = os.path.realpath(directory) + "/"
    with open("/proc/mounts") as f:
        points = [line.split()[1] for line in f]
    for point in sorted(points, key=len, reverse=True):
        point = point.replace("\\040", " ")
        if point.startswith(prefix):
            subprocess.run(["umount", "-l", point], check=False, capture_output=True)


def run_to_completion(coroutine: Awaitable[Any]) -> Any:
    """Run a coroutine to its end from synchronous code, even code that an async test (with its
    event loop running in this thread) calls: in a thread of its own, with a loop of its own."""
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()
