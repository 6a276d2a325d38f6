"""How many TokenReviews and SubjectAccessReviews the kubelet API may have in flight at once.

Every new bearer token or new (user, verb, subresource) costs a round trip to the apiserver. A
client without credentials controls how many of those it causes, so the reviews in flight are
capped: a request that would need one more is answered 429 at once instead of waiting in a queue
(a queue would only grow, and its requests would hold their connections). Identical reviews asked
for concurrently (the same token, the same access question) share the one request in flight.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Hashable, TypeVar

T = TypeVar("T")

MAX_REVIEWS_IN_FLIGHT = 32
"""Distinct reviews waiting for the apiserver at once, tokens and access questions together."""


class TooManyReviews(Exception):
    """The cap is reached: the caller answers 429 Too Many Requests."""


class InflightReviews:
    def __init__(self, limit: int = MAX_REVIEWS_IN_FLIGHT):
        self.limit = limit
        self._pending: dict[Hashable, asyncio.Future[Any]] = {}

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    async def run(self, key: Hashable, review: Callable[[], Awaitable[T]]) -> T:
        """The answer of review() for key: the one already in flight for the same key, or a new
        one if the cap allows (TooManyReviews if not)."""
        pending = self._pending.get(key)
        if pending is None:
            if len(self._pending) >= self.limit:
                raise TooManyReviews()
            pending = asyncio.ensure_future(review())
            self._pending[key] = pending
            pending.add_done_callback(lambda done: self._finished(key, done))
        # One waiter going away (its client hung up) must not cancel the review the others wait on.
        return await asyncio.shield(pending)

    def _finished(self, key: Hashable, done: asyncio.Future[Any]) -> None:
        if self._pending.get(key) is done:
            del self._pending[key]
        if not done.cancelled():
            done.exception()  # retrieved: every waiter may have gone, nobody else would
