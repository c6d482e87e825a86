"""One fetch at a time, shared by whoever asks meanwhile, and its last answer kept.

For what the gateway asks of Kafka or Redis on behalf of callers it cannot trust to be few
(`/readyz` is open to all, a tenant may name any results topic): however many ask at once, the
dependency is asked once.
"""

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class SharedFetch(Generic[T]):
    def __init__(self, fetch: Callable[[], Awaitable[T]]) -> None:
        self._fetch = fetch
        self.value: T | None = None  # the last answer; a failed fetch leaves it as it was
        self._fetched_at = -math.inf
        self._running: asyncio.Future[T] | None = None

    def age_s(self) -> float:
        """Seconds since the last answer came (infinite before the first)."""
        return time.monotonic() - self._fetched_at

    async def refresh(self) -> T:
        """A new answer: the fetch under way if there is one, else a new one. Its error, if it fails."""
        if self._running is None:
            self._running = asyncio.ensure_future(self._fetch())
            self._running.add_done_callback(self._finished)
        # Shielded: one caller going away must not cancel the fetch the others wait on.
        return await asyncio.shield(self._running)

    def _finished(self, running: "asyncio.Future[T]") -> None:
        self._running = None
        if not running.cancelled() and running.exception() is None:
            self.value, self._fetched_at = running.result(), time.monotonic()
