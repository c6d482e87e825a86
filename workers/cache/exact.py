"""The exact result cache: an in-process LRU per worker in front of Redis shared by all workers.

Checked before a request joins a batch, so a hit never costs a model call. Both tiers key by
model version (a version switch always misses) and by the model's cache generation, a Redis
counter that `fleet cache clear` bumps: entries written before a clear are never read again,
whether or not their deletion has finished, and each worker drops its local tier the next
time it refreshes the generation.

A cache never fails a request: Redis errors read as misses and writes that fail are dropped,
both logged at most once per `ERROR_LOG_INTERVAL_S`.
"""

import logging
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import msgpack

from common.redis_cluster import REDIS_DOWN, AnyRedis, mget_all, set_all
from schemas.names import cache_generation_key, exact_cache_pattern
# Entries hold a result's outputs packed as Result.encode sends them (numpy rows too).
from schemas.packing import pack_outputs
from workers.cache.keys import local_key, redis_key
from workers.cache.metrics import CacheMetrics

log = logging.getLogger(__name__)

# Bytes an entry costs beyond its key's and value's characters: the str and bytes object
# headers (49 + 33), the OrderedDict node (32) and the hash table's share, which swings between
# about 85 and 170 bytes per entry as the table fills up between resizes. Measured with
# tracemalloc on CPython 3.11 at 1k-350k entries: 180-250 bytes; 256 keeps the bound a ceiling.
ENTRY_OVERHEAD = 256
ERROR_LOG_INTERVAL_S = 30.0
SCAN_BATCH = 500
Tier = Literal["local", "redis"]
# KEYS: entry keys; ARGV: TTL seconds, then one value per key. (Plain Redis only: on a cluster,
# whose slots the keys spread over, common.redis_cluster.set_all pipelines SETs instead.)
SET_ALL_SCRIPT = """
for i = 1, #KEYS do
  redis.call('SET', KEYS[i], ARGV[i + 1], 'EX', ARGV[1])
end
return #KEYS
"""


def unpack_outputs(raw: bytes) -> dict[str, Any]:
    outputs: dict[str, Any] = msgpack.unpackb(raw, raw=False)
    return outputs


class LocalLRU:
    """Least-recently-used map of str -> bytes bounded by an estimate of its own memory.

    Every operation is O(1) (OrderedDict move_to_end / popitem). An entry that alone exceeds
    the bound is not stored, so one huge output can never flush the whole tier.
    """

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError("max_bytes must be >= 0")
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, bytes] = OrderedDict()
        self._bytes = 0
        self.evictions = 0
        self.hits = 0
        self.misses = 0

    @staticmethod
    def cost(key: str, value: bytes) -> int:
        return len(key) + len(value) + ENTRY_OVERHEAD

    @property
    def entries(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> bytes | None:
        value = self._entries.get(key)
        if value is None:
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return value

    def put(self, key: str, value: bytes) -> bool:
        """Store (or refresh) an entry; False when it is too big to store at all."""
        cost = self.cost(key, value)
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= self.cost(key, old)
        if cost > self.max_bytes:
            return False
        self._entries[key] = value
        self._bytes += cost
        while self._bytes > self.max_bytes:
            evicted_key, evicted = self._entries.popitem(last=False)
            self._bytes -= self.cost(evicted_key, evicted)
            self.evictions += 1
        return True

    def clear(self, prefix: str | None = None) -> int:
        """Drop every entry (or those whose key starts with prefix, O(n)); returns how many."""
        if prefix is None:
            dropped = len(self._entries)
            self._entries.clear()
            self._bytes = 0
            return dropped
        doomed = [key for key in self._entries if key.startswith(prefix)]
        for key in doomed:
            self._bytes -= self.cost(key, self._entries.pop(key))
        return len(doomed)

    # Last in the class body: from here on `bytes` in this class names the property, not the type.
    @property
    def bytes(self) -> int:
        """Estimated memory of the entries (what the bound limits)."""
        return self._bytes


@dataclass(frozen=True, slots=True)
class CachedOutputs:
    outputs: bytes  # msgpack of the result's outputs dict (see pack_outputs)
    tier: Tier


class _RateLimitedLog:
    """Logs a failing dependency at most once per interval, saying how many were suppressed."""

    def __init__(self, interval_s: float = ERROR_LOG_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self._last = float("-inf")
        self._suppressed = 0

    def warning(self, message: str, exc: BaseException) -> None:
        now = time.monotonic()
        if now - self._last < self.interval_s:
            self._suppressed += 1
            return
        log.warning("%s: %s: %s (%d similar suppressed)", message, type(exc).__name__, exc, self._suppressed)
        self._last, self._suppressed = now, 0


class ExactCache:
    """Exact-input cache of one model in one worker: local LRU first, then one Redis round trip."""

    def __init__(self, model: str, *, redis: AnyRedis | None, local_max_bytes: int, redis_ttl_s: int,
                 redis_enabled: bool = True, metrics: CacheMetrics | None = None) -> None:
        self.model = model
        self.local = LocalLRU(local_max_bytes)
        self._redis = redis if redis_enabled else None
        self._set_all = self._redis.register_script(SET_ALL_SCRIPT) if self._redis is not None else None
        self.redis_ttl_s = redis_ttl_s
        self._metrics = metrics
        self.generation = 0
        self._evictions_reported = 0
        self._errors = _RateLimitedLog()

    @property
    def redis_enabled(self) -> bool:
        return self._redis is not None

    async def get_many(self, version: str, digests: Sequence[str]) -> list[CachedOutputs | None]:
        """One answer per digest, in order; None where neither tier holds it."""
        generation = self.generation
        found: list[CachedOutputs | None] = []
        missing: dict[str, list[int]] = {}
        for position, digest in enumerate(digests):
            value = self.local.get(local_key(version, generation, digest))
            if value is None:
                missing.setdefault(digest, []).append(position)
                found.append(None)
            else:
                found.append(CachedOutputs(value, "local"))
        local_misses = len(digests) - sum(1 for item in found if item is not None)
        self._count("local", len(digests) - local_misses, local_misses)
        if not missing or self._redis is None:
            return found
        redis_hits = 0
        values = await self._mget([redis_key(self.model, version, generation, d) for d in missing])
        for (digest, positions), value in zip(missing.items(), values, strict=True):
            if value is None:
                continue
            self.local.put(local_key(version, generation, digest), value)
            for position in positions:
                found[position] = CachedOutputs(value, "redis")
            redis_hits += len(positions)
        self._count("redis", redis_hits, local_misses - redis_hits)
        self._report_occupancy()
        return found

    async def _mget(self, keys: list[str]) -> list[bytes | None]:
        assert self._redis is not None
        try:
            return await mget_all(self._redis, keys)
        except REDIS_DOWN as exc:
            self._errors.warning(f"exact cache of {self.model}: Redis read failed, serving as misses", exc)
            return [None] * len(keys)

    async def put_many(self, version: str, items: Sequence[tuple[str, bytes]]) -> None:
        """Store computed outputs in both tiers; a Redis failure is logged, never raised."""
        if not items:
            return
        generation = self.generation
        for digest, value in items:
            self.local.put(local_key(version, generation, digest), value)
        self._report_occupancy()
        if self._redis is None:
            return
        try:
            # One script call per batch: a command per entry would cost more to pack than the hit saves.
            assert self._set_all is not None
            await set_all(self._redis, [(redis_key(self.model, version, generation, digest), value)
                                        for digest, value in items], self.redis_ttl_s, self._set_all)
        except REDIS_DOWN as exc:
            self._errors.warning(f"exact cache of {self.model}: Redis write failed, entries kept locally only", exc)

    async def clear(self, version: str | None = None) -> int:
        """Drop this worker's local entries (of one version, or all); returns how many."""
        dropped = self.local.clear(None if version is None else f"{version}:")
        if self._metrics is not None:
            self._metrics.cleared.labels(model=self.model).inc()
        self._report_occupancy()
        return dropped

    async def refresh_generation(self) -> bool:
        """Follow `fleet cache clear`: True (and the local tier dropped) when the generation moved.

        Call it at start and then periodically; the period bounds how long a worker may serve a
        local entry after a clear. Without Redis there is no shared generation to follow.
        """
        if self._redis is None:
            return False
        try:
            raw = await self._redis.get(cache_generation_key(self.model))
        except REDIS_DOWN as exc:
            self._errors.warning(f"exact cache of {self.model}: cannot read the cache generation", exc)
            return False
        generation = int(raw) if raw is not None else 0
        if generation == self.generation:
            return False
        self.generation = generation
        await self.clear()
        return True

    def _count(self, tier: Tier, hits: int, misses: int) -> None:
        if self._metrics is not None:
            self._metrics.lookups(self.model, tier, hits, misses)

    def _report_occupancy(self) -> None:
        if self._metrics is None:
            return
        self._metrics.occupancy(self.model, "local", self.local.bytes, self.local.entries)
        new_evictions = self.local.evictions - self._evictions_reported
        if new_evictions:
            self._metrics.evictions.labels(model=self.model, tier="local").inc(new_evictions)
            self._evictions_reported = self.local.evictions


def next_generation(current: bytes | str | None) -> int:
    """A generation no earlier clear used: the clock in ms (or one past the current value), so a
    Redis that lost the counter and restarts it cannot bring back a generation already cleared."""
    return max(time.time_ns() // 1_000_000, int(current or 0) + 1)


async def clear_model_cache(redis: AnyRedis, model: str, version: str | None) -> int:
    """Invalidate a model's exact cache everywhere; returns the Redis keys deleted.

    The generation bump comes first: from that moment no worker reads an old entry from Redis,
    and each drops its local tier at its next refresh. A bump is model-wide, so clearing one
    version also retires the other versions' entries (they stay in Redis until their TTL or
    LRU eviction, unread). The SCAN + UNLINK then frees the memory of the cleared version(s);
    on a Redis Cluster, scan_iter walks every master and UNLINK is split by slot.
    """
    await redis.set(cache_generation_key(model), next_generation(await redis.get(cache_generation_key(model))))
    deleted = 0
    batch: list[bytes | str] = []
    async for key in redis.scan_iter(match=exact_cache_pattern(model, version), count=SCAN_BATCH):
        batch.append(key)
        if len(batch) >= SCAN_BATCH:
            deleted += await redis.unlink(*batch)
            batch = []
    if batch:
        deleted += await redis.unlink(*batch)
    return deleted
