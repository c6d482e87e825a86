"""The gateway's side of the per-tenant usage counts (common/tenant_usage.py): the quota book
bumps an in-memory tally on each request (a dict increment, nothing more on the request's
path), and `publish_usage` adds the tally to Redis once a second in one pipeline."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable

from common.redis_cluster import REDIS_DOWN, AnyRedis
from common.tenant_usage import ADMITTED, add_usage

log = logging.getLogger(__name__)
MAX_TENANTS = 10_000  # tenants counted between two flushes; more are left out of that flush, never kept
FLUSH_INTERVAL_S = 1.0


class UsageTally:
    """Counts since the last flush: tenant -> kind (`admitted`, `rate`, `waits`) -> count."""

    def __init__(self, max_tenants: int = MAX_TENANTS) -> None:
        self._counts: dict[str, Counter[str]] = {}
        self._max_tenants = max_tenants
        self.left_out = 0  # counts dropped because too many tenants called between two flushes

    def count(self, tenant: str, kind: str = ADMITTED, count: int = 1) -> None:
        kinds = self._counts.get(tenant)
        if kinds is None:
            if len(self._counts) >= self._max_tenants:
                self.left_out += 1
                return
            kinds = self._counts[tenant] = Counter()
        kinds[kind] += count

    def take(self) -> dict[str, Counter[str]]:
        counts, self._counts = self._counts, {}
        return counts


async def publish_usage(redis_of: Callable[[], AnyRedis], tally: UsageTally, rps_of: Callable[[str], float], *,
                        interval_s: float = FLUSH_INTERVAL_S, clock: Callable[[], float] = time.time) -> None:
    """Flush the tally to Redis every `interval_s` until cancelled. A flush Redis does not take is
    dropped and logged: these counts are for operators' eyes, and must not grow while Redis is away."""
    while True:
        await asyncio.sleep(interval_s)
        counts = tally.take()
        if not counts:
            continue
        try:
            await add_usage(redis_of(), counts, {tenant: rps_of(tenant) for tenant in counts}, clock())
        except REDIS_DOWN as exc:
            log.warning("per-tenant usage of %d tenant(s) not written to Redis: %s", len(counts), exc)
