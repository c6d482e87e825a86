"""The batch jobs cancelled while their requests still wait on a lane, as the worker knows them.

Read from Redis at most every `poll_s`; while Redis is away the last list stands, so a worker keeps
serving and at worst computes a cancelled job's request it would have skipped."""

import asyncio
import logging

from common.redis_cluster import AnyRedis
from schemas.names import CANCELLED_BATCHES_KEY
from schemas.wire import now_ms

log = logging.getLogger(__name__)
MAX_CANCELLED = 10_000  # the newest cancellations; a worker reads no more than this per poll


class CancelledBatches:
    def __init__(self, redis: AnyRedis, *, poll_s: float) -> None:
        self._redis = redis
        self._poll_s = poll_s
        self.jobs: frozenset[str] = frozenset()

    async def refresh(self) -> None:
        try:
            found = await self._redis.zrangebyscore(CANCELLED_BATCHES_KEY, now_ms(), "+inf", start=0, num=MAX_CANCELLED)
        except Exception as exc:  # Redis away: keep the last list
            log.warning("cannot read cancelled batch jobs (%s); %d known", exc, len(self.jobs))
            return
        self.jobs = frozenset(job.decode() if isinstance(job, bytes) else job for job in found)

    async def run(self) -> None:
        while True:
            await self.refresh()
            await asyncio.sleep(self._poll_s)
