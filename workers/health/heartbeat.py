"""A worker's own heartbeat: the hash that common/heartbeats.py reads, kept fresh with a TTL."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from redis.typing import EncodableT, FieldT

from common.heartbeats import CACHE_FIELD_PREFIX, BeatFields
from common.redis_cluster import REDIS_DOWN, AnyRedis, multi_key_pipeline
from schemas.names import WORKER_MODELS_KEY, worker_key, workers_index_key

log = logging.getLogger(__name__)


class Heartbeat:
    """One worker's heartbeat; `beat` writes it, `run` beats every interval until cancelled."""

    def __init__(self, redis: AnyRedis, *, model: str, worker_id: str, role: str, device: str, ttl_s: float,
                 clock: Callable[[], float] = time.time) -> None:
        if ttl_s <= 0:
            raise ValueError("heartbeat ttl must be positive")
        self.redis = redis
        self.model = model
        self.worker_id = worker_id
        self.role = role
        self.device = device
        self.ttl_ms = max(int(ttl_s * 1000), 1)
        self.key = worker_key(model, worker_id)
        self._clock = clock

    async def beat(self, state: str, reason: str, version: str, lag: int, *, batch: int = 0,
                   max_batch: int = 0, cache: tuple[tuple[str, int], ...] = ()) -> None:
        """Write the heartbeat and push its expiry `ttl_s` ahead, in one transaction on a plain Redis.

        On a Redis Cluster the hash, the index and the models set lie in different slots (their
        names are in schemas/names.py, read by `fleet workers` and the gateway's router), so they
        go in one non-transactional pipeline: readers already take the hash as the last word
        (an index entry without its hash is skipped), so a beat seen half-written is harmless."""
        fields: dict[FieldT, EncodableT] = {
            "worker": self.worker_id, "model": self.model, "role": self.role, "device": self.device,
            "state": str(state), "reason": reason, "version": version, "lag": int(lag),
            "batch": int(batch), "max_batch": int(max_batch),
            **{CACHE_FIELD_PREFIX + name: int(count) for name, count in cache},
            "beat_ms": int(self._clock() * 1000),
        }
        async with multi_key_pipeline(self.redis) as pipe:
            pipe.hset(self.key, mapping=fields)
            pipe.pexpire(self.key, self.ttl_ms)
            pipe.zadd(workers_index_key(self.model), {self.worker_id: int(fields["beat_ms"]) + self.ttl_ms})
            pipe.sadd(WORKER_MODELS_KEY, self.model)
            await pipe.execute()

    async def run(self, interval_s: float, read: Callable[[], BeatFields]) -> None:
        """Beat every `interval_s` with what `read()` returns, until cancelled.

        A Redis error skips one beat and is logged: a Redis blip must not stop the worker,
        and the TTL hides the worker only if beats stay missing for `ttl_s`.
        """
        while True:
            now = read()
            try:
                await self.beat(now.state, now.reason, now.version, now.lag, batch=now.batch, max_batch=now.max_batch,
                                cache=now.cache)
            except REDIS_DOWN as exc:
                log.warning("heartbeat of %s not written: %s", self.worker_id, exc)
            await asyncio.sleep(interval_s)

    async def remove(self) -> None:
        """Delete the heartbeat at a clean shutdown, so the worker is gone at once, not after the TTL."""
        async with multi_key_pipeline(self.redis) as pipe:
            pipe.delete(self.key)
            pipe.zrem(workers_index_key(self.model), self.worker_id)
            await pipe.execute()
