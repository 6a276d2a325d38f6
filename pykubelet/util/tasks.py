"""Named, guarded tasks: the agent's long-running loops, and the one-shot steps beside them.

A loop is meant to run until cancelled: if one ends, that is news (`LoopDied` from `first_death`).
A one-shot step (wait for X, then do Y) may end; only its failure is news. Either way nothing
ends silently, and `stop` cancels whatever still runs.
"""

from __future__ import annotations

import asyncio
import signal
from typing import Awaitable, Callable

from pykubelet.util.log import get_logger

log = get_logger(__name__)


class LoopDied(RuntimeError):
    """One of the long-running loops ended; the agent (or the proxy) stops, its pods or rules stay."""


class Tasks:
    def __init__(self) -> None:
        self.loops: dict[str, asyncio.Task[None]] = {}
        self._steps: set[asyncio.Task[None]] = set()
        self._step_failed: asyncio.Future[BaseException] | None = None

    def loop(self, name: str, coro: Awaitable[None]) -> None:
        """Run a loop that must not end."""
        self.loops[name] = asyncio.create_task(coro, name=name)  # type: ignore[arg-type]

    def once(self, name: str, coro: Awaitable[None]) -> None:
        """Run a step that ends when its work is done; a failure of it stops the agent too."""
        task = asyncio.create_task(coro, name=name)  # type: ignore[arg-type]
        self._steps.add(task)
        task.add_done_callback(self._step_done)

    def _step_done(self, task: asyncio.Task[None]) -> None:
        self._steps.discard(task)
        if task.cancelled() or task.exception() is None:
            return
        log.error("Agent step failed", task=task.get_name(), exc_info=task.exception())
        if self._step_failed is not None and not self._step_failed.done():
            self._step_failed.set_result(LoopDied(f"step {task.get_name()} failed: {task.exception()}"))

    def alive(self) -> bool:
        """Every loop still runs (the /healthz syncloop check)."""
        return all(not t.done() for t in self.loops.values())

    async def first_death(self) -> LoopDied:
        """Wait until a loop ends or a step fails; what to raise for it."""
        self._step_failed = asyncio.get_running_loop().create_future()
        waiters: list[asyncio.Future] = [*self.loops.values(), self._step_failed]
        done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        if self._step_failed in done:
            return self._step_failed.result()  # type: ignore[return-value]
        task = done.pop()
        return LoopDied(f"loop {task.get_name()} ended: {task.exception() or 'returned'}")  # type: ignore[union-attr]

    async def stop(self) -> None:
        tasks = [*self.loops.values(), *self._steps]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def after(event: asyncio.Event, then: Callable[[], None]) -> None:
    """A step: once `event` is set, call `then`."""
    await event.wait()
    then()


def cancel_on_signals() -> None:
    """SIGTERM and SIGINT cancel the current task (the agent's or the proxy's run): its `finally`
    stops what it started, and the command exits 0."""
    task = asyncio.current_task()
    assert task is not None, "called outside a task"
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
