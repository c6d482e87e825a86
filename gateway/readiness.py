"""What /readyz answers: whether Kafka and Redis answer, asked at most once a second.

/readyz is open to everyone (an orchestrator's probe carries no key). Asked on every call, a burst
of probes pinged Redis and fetched Kafka's metadata once each, all at once: 300 of them took the
connection pool that key lookups and replies use, so the gateway reported itself down and turned
real tenants away while Redis was fine. Here one check runs at a time, every caller meanwhile gets
its answer, and the answer serves for `fresh_s` after it, so probes cost Kafka and Redis nothing
more however many arrive.
"""

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

Check = Callable[[], Awaitable[Any]]


class Readiness:
    def __init__(self, checks: dict[str, Check], *, timeout_s: float, fresh_s: float = 1.0) -> None:
        """`checks`: name -> a call that raises (or hangs past `timeout_s`) when that dependency is down."""
        self._checks = checks
        self._timeout_s = timeout_s
        self._fresh_s = fresh_s
        self._answer: dict[str, bool] | None = None
        self._answered_at = 0.0
        self._running: asyncio.Future[dict[str, bool]] | None = None

    async def checks(self) -> dict[str, bool]:
        """Each dependency's answer, at most `fresh_s` old."""
        if self._answer is not None and time.monotonic() - self._answered_at < self._fresh_s:
            return dict(self._answer)
        if self._running is None:
            self._running = asyncio.ensure_future(self._ask())
            self._running.add_done_callback(self._finished)
        # Shielded: one caller going away must not cancel the check the others wait on.
        return dict(await asyncio.shield(self._running))

    async def _ask(self) -> dict[str, bool]:
        names = list(self._checks)
        answers = await asyncio.gather(*(self._answers(self._checks[name]) for name in names))
        return dict(zip(names, answers, strict=True))

    async def _answers(self, check: Check) -> bool:
        try:
            async with asyncio.timeout(self._timeout_s):
                await check()
            return True
        except Exception:
            return False

    def _finished(self, running: "asyncio.Future[dict[str, bool]]") -> None:
        self._running = None
        if not running.cancelled() and running.exception() is None:
            self._answer, self._answered_at = running.result(), time.monotonic()
