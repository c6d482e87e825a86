"""The Redis memory figures the sizing arithmetic of docs/how-to/scale.md rests on, measured on
the real Redis."""

from common.clients import redis_client
from common.settings import FleetSettings
from fleet_dev.bench.redis_memory import KINDS, measure_kind


async def test_a_result_costs_its_payload_plus_a_bounded_overhead_and_leaves_nothing_behind(
        stack: FleetSettings) -> None:
    redis = redis_client(stack)
    try:
        keys_before = await redis.dbsize()
        embedding, label = [await measure_kind(redis, kind, 2_000) for kind in KINDS]
        keys_after = await redis.dbsize()
    finally:
        await redis.aclose()
    assert 2_000 < embedding["payload"] < 2_600 and label["payload"] < 500
    for figures in (embedding, label):
        # Redis keeps the value plus a key, an expiry and allocator slack: more than the payload, not double.
        assert figures["payload"] < figures["result"] < 2 * figures["payload"] + 512
        assert 0 < figures["cache"] < figures["result"] and 0 < figures["reply"]
    assert keys_after <= keys_before + 16  # 12,000 keys written, all gone (other tests may write meanwhile)
