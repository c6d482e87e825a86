"""A reply reader whose first connection attempt fails is still starting, not down: one attempt that
timed out while the event loop was busy elsewhere must not turn callers away."""

import asyncio
from typing import Any

from gateway.waiter import STARTING, ReplyWaiter


class FlakyRedis:
    """Fails the first PING, answers the rest; XREAD blocks as a quiet stream does."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.pings = 0

    async def ping(self) -> bool:
        self.pings += 1
        if self.pings <= self.failures:
            raise TimeoutError("Timeout connecting to server")
        return True

    async def xread(self, *args: Any, **kwargs: Any) -> list[Any]:
        await asyncio.sleep(0.05)
        return []


async def test_one_failed_first_attempt_leaves_the_reader_starting() -> None:
    redis = FlakyRedis(failures=1)
    waiter = ReplyWaiter(redis)  # type: ignore[arg-type]
    waiter.start()
    seen = set()
    try:
        for _ in range(40):
            seen.add(waiter.down_reason)
            await asyncio.sleep(0.005)
    finally:
        await waiter.stop()
    assert seen <= {STARTING, None} and None in seen and redis.pings >= 2


async def test_an_outage_at_start_is_reported() -> None:
    waiter = ReplyWaiter(FlakyRedis(failures=10_000), max_backoff_s=0.01)  # type: ignore[arg-type]
    waiter.start()
    try:
        await asyncio.sleep(0.2)
        assert waiter.down_reason is not None and "Timeout connecting" in waiter.down_reason
    finally:
        await waiter.stop()
