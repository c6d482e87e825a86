"""Per-tenant usage counts in the real Redis: flushes add up per minute, and the reader sums an hour."""

from __future__ import annotations

from uuid import uuid4

from redis.asyncio import Redis

from common.tenant_usage import USAGE_TTL_S, add_usage, minute_of, read_usage
from schemas.names import tenant_usage_key

# A fixed minute far in the past, so the test never meets a gateway's live counts.
NOW_S = 1_000_000 * 60 + 30.0


async def test_flushes_add_up_and_the_hour_is_summed(redis: Redis) -> None:
    tenant = f"usage-{uuid4().hex[:8]}"
    keys = [tenant_usage_key(minute_of(NOW_S) - ago) for ago in (0, 1)]
    try:
        await add_usage(redis, {tenant: {"admitted": 90, "rate": 2}}, {tenant: 1.0}, NOW_S - 60)
        await add_usage(redis, {tenant: {"admitted": 3}}, {tenant: 2.5}, NOW_S)
        await add_usage(redis, {tenant: {"admitted": 4, "waits": 1}}, {tenant: 2.5}, NOW_S)
        usage = (await read_usage(redis, NOW_S))[tenant]
        assert (usage.this_minute["admitted"], usage.this_minute["waits"], usage.this_minute["rate"]) == (7, 1, 0)
        assert (usage.last_hour["admitted"], usage.last_hour["rate"], usage.last_hour["waits"]) == (97, 2, 1)
        assert usage.rps_limit == 2.5, "the newest minute's limit"
        assert usage.busiest_minute == 90 and usage.busiest_use == 90 / 60 / 2.5
        assert 0 < await redis.ttl(keys[0]) <= USAGE_TTL_S, "every minute's counts expire"
        assert tenant not in await read_usage(redis, NOW_S + 3600), "an hour later they are out of the window"
    finally:
        await redis.delete(*keys)
