"""What /readyz answers: whether Kafka and Redis answer, asked at most once a second.

/readyz is open to everyone (an orchestrator's probe carries no key). Asked on every call, a burst
of probes pinged Redis and fetched Kafka's metadata once each, all at once: 300 of them took the
connection pool that key lookups and replies use, so the gateway reported itself down and turned
real tenants away while Redis was fine. Here one check runs at a time, every caller meanwhile gets
its answer, and the answer serves for `fresh_s` after it, so probes cost Kafka and Redis nothing
more however many arrive.
"""

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from gateway.shared_fetch import SharedFetch

Check = Callable[[], Awaitable[Any]]


class Readiness:
    def __init__(self, checks: dict[str, Check], *, timeout_s: float, fresh_s: float = 1.0) -> None:
        """`checks`: name -> a call that raises (or hangs past `timeout_s`) when that dependency is down."""
        self._checks = checks
        self._timeout_s = timeout_s
        self._fresh_s = fresh_s
        self._answers_of_all: SharedFetch[dict[str, bool]] = SharedFetch(self._ask)

    async def checks(self) -> dict[str, bool]:
        """Each dependency's answer, at most `fresh_s` old."""
        shared = self._answers_of_all
        if shared.value is not None and shared.age_s() < self._fresh_s:
            return dict(shared.value)
        return dict(await shared.refresh())

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
