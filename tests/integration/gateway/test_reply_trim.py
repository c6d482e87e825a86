"""A reply stream keeps only what its waiter has not read yet (give or take one trim's worth)."""

import asyncio
import secrets

from redis.asyncio import Redis

from common.settings import FleetSettings
from gateway.waiter import TRIM_EVERY, ReplyWaiter
from schemas.wire import Result, Status


async def test_replies_read_are_trimmed_and_none_unread_is_lost(stack: FleetSettings) -> None:
    redis = Redis.from_url(stack.redis_url)
    waiter = ReplyWaiter(redis)
    waiter.start()
    try:
        ids = [secrets.token_hex(16) for _ in range(int(2.5 * TRIM_EVERY))]
        futures = [waiter.expect(request_id) for request_id in ids]
        async with redis.pipeline(transaction=False) as pipe:
            for request_id in ids:
                result = Result(id=request_id, model="m", status=Status.ok, outputs={"label": "x"}).encode()
                pipe.xadd(waiter.stream, {"id": request_id, "result": result})
            await pipe.execute()
        answers = await asyncio.wait_for(asyncio.gather(*futures), 30)
        left = await redis.xlen(waiter.stream)
        later_id = secrets.token_hex(16)
        later = waiter.expect(later_id)
        await redis.xadd(waiter.stream, {"id": later_id, "result": Result(id=later_id, model="m",
                                                                          status=Status.ok).encode()})
        assert (await asyncio.wait_for(later, 10)).id == later_id
    finally:
        await waiter.stop()
        await redis.delete(waiter.stream)
        await redis.aclose()
    assert [answer.id for answer in answers] == ids
    # Reads come in whatever sizes the stream holds, and a trim follows each TRIM_EVERY replies read:
    # what is left is fewer than TRIM_EVERY replies read since the last trim, plus at most a stream
    # node that approximate trimming keeps. Untrimmed, all 2,500 would be there.
    assert left < TRIM_EVERY + 200
