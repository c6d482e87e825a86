"""Turns in the order they were taken: overlapping deliveries hand records over one after another.

A delivery takes its turn the moment it begins (no await before it, so the order is the order
deliveries began) and waits for the previous turn only where order matters: handing its
results-topic records to the producer. Acknowledgements are awaited outside the turn, so the
next delivery's records go out while this one's are on their way.
"""

import asyncio
from types import TracebackType


class Turn:
    def __init__(self, after: asyncio.Event) -> None:
        self._after = after
        self.done = asyncio.Event()

    async def __aenter__(self) -> None:
        await self._after.wait()

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        trace: TracebackType | None) -> None:
        self.done.set()

    def release(self) -> None:
        """Let the next turn go, whether or not this one was used (it may be entered again on a retry)."""
        self.done.set()


class Turns:
    def __init__(self) -> None:
        self._last = asyncio.Event()
        self._last.set()

    def take(self) -> Turn:
        turn = Turn(after=self._last)
        self._last = turn.done
        return turn
