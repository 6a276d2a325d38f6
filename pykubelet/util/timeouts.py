"""Awaiting with a deadline without ever losing a cancellation.

Python 3.11's asyncio.wait_for can swallow a cancellation: when what it awaits finishes in the
same loop iteration as the task is cancelled, wait_for returns the result instead of raising
(CPython gh-86296; 3.12 rebuilt wait_for on asyncio.timeout). A loop around such a wait then
goes on, and whoever cancelled it and waits for it (the agent's stop, for one) waits forever:
a PLEG relist woken just as the agent stopped did that. asyncio.timeout counts the task's
cancellations and never mistakes one for its own deadline.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, TypeVar

T = TypeVar("T")


async def within(awaitable: Awaitable[T], timeout: float | None) -> T:
    """`await awaitable`, or TimeoutError once `timeout` seconds have passed (None: no limit)."""
    async with asyncio.timeout(timeout):
        return await awaitable
