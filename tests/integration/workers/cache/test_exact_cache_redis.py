"""The exact cache against the real Redis (and Kafka for `fleet cache clear`) of `scripts/stack up`."""

import uuid

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from redis.asyncio import Redis

from fleet.commands import cache as cache_cli
from common.settings import FleetSettings
from fleet.exits import Exit
from common.topics import ensure_topics
from schemas.names import cache_generation_key, exact_cache_pattern, semantic_cache_topic
from workers.cache.exact import CachedOutputs, ExactCache, clear_model_cache, pack_outputs
from workers.cache.keys import input_digest, redis_key

TTL_S = 120


def model_name() -> str:
    """A model of its own per test, so tests never see each other's entries or generations."""
    return f"cachetest-{uuid.uuid4().hex[:8]}"


def version(model: str, n: int = 1) -> str:
    return f"{model}-20250101-{n:03d}"


def cache(model: str, redis: Redis) -> ExactCache:
    return ExactCache(model, redis=redis, local_max_bytes=1 << 20, redis_ttl_s=TTL_S)


async def test_a_fresh_worker_hits_redis_then_its_own_tier(redis: Redis) -> None:
    model = model_name()
    digest = input_digest("how do I reset my password?", {})
    outputs = pack_outputs({"label": "password_reset", "score": 0.97})
    await cache(model, redis).put_many(version(model), [(digest, outputs)])

    fresh = cache(model, redis)
    assert await fresh.get_many(version(model), [digest, input_digest("other", {})]) == \
        [CachedOutputs(outputs, "redis"), None]
    assert await fresh.get_many(version(model), [digest]) == [CachedOutputs(outputs, "local")]


async def test_a_version_switch_misses(redis: Redis) -> None:
    model = model_name()
    digest = input_digest("cancel my order", {})
    await cache(model, redis).put_many(version(model, 1), [(digest, b"v1 answer")])
    assert await cache(model, redis).get_many(version(model, 2), [digest]) == [None]


async def test_entries_carry_the_ttl(redis: Redis) -> None:
    model = model_name()
    digest = input_digest("where is my parcel", {})
    await cache(model, redis).put_many(version(model), [(digest, b"x")])
    ttl = await redis.ttl(redis_key(model, version(model), 0, digest))
    assert 0 < ttl <= TTL_S


async def test_clear_bumps_the_generation_and_a_running_worker_misses_after_refresh(redis: Redis) -> None:
    model = model_name()
    digests = [input_digest(f"question {i}", {}) for i in range(3)]
    running = cache(model, redis)
    assert not await running.refresh_generation()  # no clear yet: generation 0
    await running.put_many(version(model), [(d, b"answer") for d in digests])

    assert await clear_model_cache(redis, model, None) == 3
    generation = int(await redis.get(cache_generation_key(model)))
    assert generation != running.generation
    await clear_model_cache(redis, model, None)
    assert int(await redis.get(cache_generation_key(model))) > generation, "every clear gets a generation of its own"
    assert [key async for key in redis.scan_iter(match=exact_cache_pattern(model))] == []

    assert await running.refresh_generation()
    assert running.generation == int(await redis.get(cache_generation_key(model))) and running.local.entries == 0
    assert await running.get_many(version(model), digests) == [None, None, None]
    assert not await running.refresh_generation()


async def test_entries_written_before_a_clear_are_never_read(redis: Redis) -> None:
    """A worker that has not refreshed yet still writes under the old generation; nobody reads it."""
    model = model_name()
    digest = input_digest("refund status", {})
    stale_writer = cache(model, redis)
    await clear_model_cache(redis, model, None)
    await stale_writer.put_many(version(model), [(digest, b"stale")])  # generation 0 still

    reader = cache(model, redis)
    assert await reader.refresh_generation()
    assert await reader.get_many(version(model), [digest]) == [None]


async def test_clearing_one_version_deletes_only_its_entries(redis: Redis) -> None:
    model = model_name()
    digest = input_digest("open an account", {})
    writer = cache(model, redis)
    await writer.put_many(version(model, 1), [(digest, b"one")])
    await writer.put_many(version(model, 2), [(digest, b"two")])
    assert await clear_model_cache(redis, model, version(model, 1)) == 1
    assert await redis.exists(redis_key(model, version(model, 2), 0, digest)) == 1


async def test_clear_model_cache_deletes_in_batches(redis: Redis) -> None:
    model = model_name()
    writer = cache(model, redis)
    await writer.put_many(version(model), [(f"{i:032x}", b"v") for i in range(1_203)])
    assert await clear_model_cache(redis, model, version(model)) == 1_203


async def _topics(bootstrap: str) -> list[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return list(await admin.list_topics())
    finally:
        await admin.close()


async def _delete_topic(bootstrap: str, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_topics([topic])
    finally:
        await admin.close()


async def test_cli_clear_and_stats(redis: Redis, stack: FleetSettings, capsys: pytest.CaptureFixture[str]) -> None:
    model = model_name()
    digest = input_digest("change my address", {})
    await cache(model, redis).put_many(version(model, 1), [(digest, b"one")])
    await cache(model, redis).put_many(version(model, 2), [(digest, b"two"), ("ab" * 16, b"three")])
    mine = [semantic_cache_topic(model, version(model, 1)), semantic_cache_topic(model, version(model, 2))]
    neighbour = semantic_cache_topic(f"{model}.x", f"{model}.x-20250101-001")  # a model whose name extends ours
    await ensure_topics(stack, [*mine, neighbour], 1)

    assert await cache_cli.stats(redis, model) == Exit.OK
    printed = capsys.readouterr().out
    assert "generation 0" in printed and "maxmemory-policy" not in printed and "policy volatile-lru" in printed
    rows = [line.split() for line in printed.splitlines()]
    assert [version(model, 1), "1", "0"] in rows and [version(model, 2), "2", "0"] in rows

    assert await cache_cli.clear(redis, stack, model, None) == Exit.OK
    printed = capsys.readouterr().out
    assert "3 Redis entries deleted" in printed and "generation now 1" in printed
    remaining = await _topics(stack.kafka_bootstrap)
    assert not set(mine) & set(remaining)
    assert neighbour in remaining
    await _delete_topic(stack.kafka_bootstrap, neighbour)


def test_cli_says_when_redis_is_down(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FLEET_REDIS_URL", "redis://127.0.0.1:1/0")
    assert cache_cli.main(["stats", "some-model"]) == Exit.UNAVAILABLE
    assert "cannot reach Redis" in capsys.readouterr().err
