"""The in-process tier (LocalLRU) and ExactCache without Redis: bounds, recency, counts, metrics."""

import logging

import pytest
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from workers.cache.exact import ENTRY_OVERHEAD, CachedOutputs, ExactCache, LocalLRU, pack_outputs, unpack_outputs
from workers.cache.metrics import CacheMetrics

VALUE = b"x" * 44
KEY_COST = LocalLRU.cost("k00", VALUE)  # every key below is 3 characters


def keys(n: int) -> list[str]:
    return [f"k{i:02d}" for i in range(n)]


def test_cost_counts_key_value_and_overhead() -> None:
    assert KEY_COST == 3 + 44 + ENTRY_OVERHEAD


def test_evicts_oldest_at_the_byte_bound() -> None:
    lru = LocalLRU(max_bytes=KEY_COST * 3)
    for key in keys(3):
        lru.put(key, VALUE)
    assert (lru.entries, lru.bytes, lru.evictions) == (3, KEY_COST * 3, 0)
    lru.put("k03", VALUE)
    assert lru.entries == 3 and lru.bytes <= lru.max_bytes and lru.evictions == 1
    assert lru.get("k00") is None
    assert lru.get("k03") == VALUE


def test_keeps_recently_used_entries() -> None:
    lru = LocalLRU(max_bytes=KEY_COST * 3)
    for key in keys(3):
        lru.put(key, VALUE)
    assert lru.get("k00") == VALUE  # k00 becomes the most recent; k01 is now the oldest
    lru.put("k03", VALUE)
    assert lru.get("k01") is None
    assert lru.get("k00") == VALUE and lru.get("k02") == VALUE


def test_one_big_entry_evicts_as_many_as_it_needs() -> None:
    lru = LocalLRU(max_bytes=KEY_COST * 4)
    for key in keys(4):
        lru.put(key, VALUE)
    big = b"y" * (KEY_COST * 2)
    assert lru.put("big", big)
    assert lru.bytes <= lru.max_bytes and lru.get("big") == big and lru.evictions >= 2


def test_an_entry_bigger_than_the_bound_is_not_stored() -> None:
    lru = LocalLRU(max_bytes=KEY_COST * 2)
    lru.put("k00", VALUE)
    assert not lru.put("huge", b"z" * (KEY_COST * 2))
    assert lru.get("huge") is None
    assert lru.get("k00") == VALUE and lru.evictions == 0


def test_overwrite_replaces_the_cost() -> None:
    lru = LocalLRU(max_bytes=10_000)
    lru.put("k00", VALUE)
    lru.put("k00", VALUE * 2)
    assert lru.entries == 1 and lru.bytes == LocalLRU.cost("k00", VALUE * 2)


def test_counts_hits_and_misses() -> None:
    lru = LocalLRU(max_bytes=10_000)
    lru.put("k00", VALUE)
    lru.get("k00")
    lru.get("k00")
    lru.get("nope")
    assert (lru.hits, lru.misses) == (2, 1)


def test_clear_by_prefix_and_all() -> None:
    lru = LocalLRU(max_bytes=100_000)
    for key in ("v1:a", "v1:b", "v2:a"):
        lru.put(key, VALUE)
    assert lru.clear("v1:") == 2
    assert lru.entries == 1 and lru.bytes == LocalLRU.cost("v2:a", VALUE)
    assert lru.clear() == 1 and lru.bytes == 0 and lru.get("v2:a") is None


def test_negative_bound_is_refused() -> None:
    with pytest.raises(ValueError):
        LocalLRU(-1)


def test_outputs_round_trip_with_single_floats() -> None:
    outputs = unpack_outputs(pack_outputs({"label": "billing", "score": 0.5, "embedding": [0.25, -1.0]}))
    assert outputs == {"label": "billing", "score": 0.5, "embedding": [0.25, -1.0]}


def unreachable_redis() -> Redis:
    """A client of a port nobody listens on, failing at once (no retries)."""
    return Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.05, retry=Retry(NoBackoff(), 0))


def local_cache(max_bytes: int = 1_000_000, metrics: CacheMetrics | None = None,
                redis: Redis | None = None, enabled: bool = True) -> ExactCache:
    return ExactCache("m", redis=redis, local_max_bytes=max_bytes, redis_ttl_s=60, redis_enabled=enabled,
                      metrics=metrics)


async def test_put_then_get_hits_the_local_tier_in_order() -> None:
    cache = local_cache()
    await cache.put_many("v1", [("d1", b"one"), ("d2", b"two")])
    found = await cache.get_many("v1", ["d2", "missing", "d1", "d2"])
    assert found == [CachedOutputs(b"two", "local"), None, CachedOutputs(b"one", "local"),
                     CachedOutputs(b"two", "local")]


async def test_another_version_misses() -> None:
    cache = local_cache()
    await cache.put_many("v1", [("d1", b"one")])
    assert await cache.get_many("v2", ["d1"]) == [None]


async def test_clear_one_version_keeps_the_others() -> None:
    cache = local_cache()
    await cache.put_many("v1", [("d1", b"one")])
    await cache.put_many("v2", [("d1", b"uno")])
    assert await cache.clear("v1") == 1
    assert await cache.get_many("v1", ["d1"]) == [None]
    assert await cache.get_many("v2", ["d1"]) == [CachedOutputs(b"uno", "local")]


async def test_without_redis_there_is_no_generation_to_follow() -> None:
    cache = local_cache()
    await cache.put_many("v1", [("d1", b"one")])
    assert not await cache.refresh_generation()
    assert cache.generation == 0 and not cache.redis_enabled
    assert await cache.get_many("v1", ["d1"]) == [CachedOutputs(b"one", "local")]


async def test_a_disabled_redis_tier_is_never_called() -> None:
    # An unconnectable client: any call through it would fail or time out, so a pass proves none is made.
    unreachable = unreachable_redis()
    try:
        cache = local_cache(redis=unreachable, enabled=False)
        await cache.put_many("v1", [("d1", b"one")])
        assert await cache.get_many("v1", ["d1", "d2"]) == [CachedOutputs(b"one", "local"), None]
        assert not cache.redis_enabled
    finally:
        await unreachable.aclose()


async def test_an_unreachable_redis_reads_as_misses_and_writes_do_not_raise() -> None:
    unreachable = unreachable_redis()
    registry = CollectorRegistry()
    try:
        cache = local_cache(redis=unreachable, metrics=CacheMetrics(registry))
        await cache.put_many("v1", [("d1", b"one")])  # local tier stored, Redis error swallowed
        assert await cache.get_many("v1", ["d1", "d2"]) == [CachedOutputs(b"one", "local"), None]
        assert not await cache.refresh_generation()
    finally:
        await unreachable.aclose()
    assert registry.get_sample_value("fleet_cache_misses_total", {"model": "m", "tier": "redis"}) == 1


async def test_metrics_count_lookups_occupancy_and_evictions() -> None:
    registry = CollectorRegistry()
    cache = local_cache(max_bytes=LocalLRU.cost("v1:g0:d0", b"v") * 2, metrics=CacheMetrics(registry))
    await cache.put_many("v1", [("d0", b"v"), ("d1", b"v"), ("d2", b"v")])
    await cache.get_many("v1", ["d0", "d1", "d2"])
    await cache.clear()

    def sample(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, {"model": "m", **labels})

    assert sample("fleet_cache_hits_total", tier="local") == 2
    assert sample("fleet_cache_misses_total", tier="local") == 1
    assert sample("fleet_cache_evictions_total", tier="local") == 1
    assert sample("fleet_cache_entries", tier="local") == 0 and sample("fleet_cache_bytes", tier="local") == 0
    assert sample("fleet_cache_cleared_total") == 1
    assert sample("fleet_cache_misses_total", tier="redis") is None  # no Redis tier, no Redis lookups


def test_cache_metric_names_carry_the_prefix() -> None:
    registry = CollectorRegistry()
    CacheMetrics(registry)
    names = {metric.name for metric in registry.collect()}
    assert names and all(name.startswith("fleet_cache_") for name in names)
    assert {"fleet_cache_hits", "fleet_cache_semantic_similarity", "fleet_cache_dedupe"} <= names


async def test_redis_errors_are_logged_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    unreachable = unreachable_redis()
    try:
        cache = local_cache(redis=unreachable)
        with caplog.at_level(logging.WARNING, logger="workers.cache.exact"):
            for _ in range(5):
                assert await cache.get_many("v1", ["d1"]) == [None]
    finally:
        await unreachable.aclose()
    warnings = [r for r in caplog.records if "Redis read failed" in r.getMessage()]
    assert len(warnings) == 1  # the interval (30 s) is far longer than this loop


def test_a_cleared_generation_never_comes_back_after_redis_forgets_the_counter() -> None:
    from workers.cache.exact import next_generation

    cleared = next_generation(None)
    assert cleared > 1_600_000_000_000, "clock-based, so a restarted counter cannot reuse it"
    assert next_generation(str(cleared + 10**9)) == cleared + 10**9 + 1
