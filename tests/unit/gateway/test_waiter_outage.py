"""A Redis outage is no reason to refuse a wait: the wait is taken, and once the reader is back it
reads the result keys of every pending wait, so a reply whose stream entry was lost is found."""

import asyncio
from typing import Any

from gateway.waiter import ReplyWaiter
from schemas.names import result_key
from schemas.wire import Result, Status

DELIVERED = "ab" * 16  # its result key was written while the reader was away; its stream entry lost
NOT_YET = "cd" * 16


class Pipeline:
    def __init__(self, store: dict[str, bytes]) -> None:
        self.store = store
        self.keys: list[str] = []

    async def __aenter__(self) -> "Pipeline":
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        return None

    def get(self, key: str) -> None:
        self.keys.append(key)

    async def execute(self) -> list[bytes | None]:
        return [self.store.get(key) for key in self.keys]


class ReturningRedis:
    """Down for its first `down_pings` PINGs, then up with `store` in it; XREAD finds nothing."""

    def __init__(self, down_pings: int, store: dict[str, bytes]) -> None:
        self.down_pings = down_pings
        self.pings = 0
        self.store = store

    async def ping(self) -> bool:
        self.pings += 1
        if self.pings <= self.down_pings:
            raise ConnectionError("Error 111 connecting")
        return True

    async def xread(self, *args: Any, **kwargs: Any) -> list[Any]:
        if self.pings <= self.down_pings:
            raise ConnectionError("Error 111 connecting")
        await asyncio.sleep(0.05)
        return []

    def pipeline(self, transaction: bool = True) -> Pipeline:
        return Pipeline(self.store)


async def test_waits_are_taken_during_an_outage_and_resolved_from_result_keys_when_redis_returns() -> None:
    result = Result(id=DELIVERED, model="m", status=Status.ok, outputs={"x": 1})
    redis = ReturningRedis(down_pings=10, store={result_key(DELIVERED): result.encode()})
    waiter = ReplyWaiter(redis, max_backoff_s=0.05)  # type: ignore[arg-type]
    waiter.start()
    try:
        async with asyncio.timeout(5):
            while waiter.down_reason is None or waiter.down_reason == "starting":
                await asyncio.sleep(0.01)
        delivered = waiter.expect(DELIVERED)  # taken while Redis is down
        not_yet = waiter.expect(NOT_YET)
        assert (await waiter.wait(delivered, 5)).id == DELIVERED
        assert not not_yet.done(), "no result key, no answer: it waits on"
    finally:
        await waiter.stop()
