"""Where a new request goes: the primary topic, or straight to the CPU fallback topic when no
healthy primary worker of the model is left but a fallback worker is alive.

Decisions come from the workers' heartbeats in Redis and are cached for a second, so routing
costs one index read per model per second, not one per request. While Redis does not answer,
the last known route stands (the primary topic when none is known): a request still reaches
Kafka, and Redis being away for a moment fails nothing.
"""

import asyncio
import logging
import time
from dataclasses import dataclass, replace

from redis.exceptions import RedisError

from common.redis_cluster import AnyRedis
from common.heartbeats import WorkerInfo, list_workers
from common.logs import LogThrottle
from schemas.names import fallback_topic, requests_topic

log = logging.getLogger(__name__)

CACHE_S = 1.0
LOOKUP_TIMEOUT_S = 1.0  # a slow Redis costs a request at most this, then the last known route stands


@dataclass(frozen=True)
class Route:
    topic: str
    degraded: bool
    workers_alive: int
    stale: bool = False  # Redis did not answer: the last known route, or the primary topic


def choose(model: str, workers: list[WorkerInfo]) -> Route:
    alive = [w for w in workers if w.state != "failed"]
    if any(w.serving_primary for w in workers):
        return Route(requests_topic(model), degraded=False, workers_alive=len(alive))
    if any(w.role == "fallback" and w.state != "failed" and not w.drained for w in workers):
        return Route(fallback_topic(model), degraded=True, workers_alive=len(alive))
    # Nobody serves yet: keep to the primary topic, where the next primary (or a fallback
    # taking it over) will find the request.
    return Route(requests_topic(model), degraded=False, workers_alive=len(alive))


class Router:
    def __init__(self, redis: AnyRedis, *, cache_s: float = CACHE_S, log_every_s: float = 10.0) -> None:
        self._redis = redis
        self._cache_s = cache_s
        self._routes: dict[str, tuple[Route, float]] = {}
        self._lookups: dict[str, asyncio.Task[Route]] = {}
        self._throttle = LogThrottle(log, log_every_s)

    async def route(self, model: str, *, fresh: bool = False) -> Route:
        cached = self._routes.get(model)
        if cached is not None and not fresh and time.monotonic() - cached[1] < self._cache_s:
            return cached[0]
        # Thousands of concurrent requests share one lookup instead of one Redis read each.
        lookup = self._lookups.get(model)
        if lookup is None:
            lookup = asyncio.create_task(self._look_up(model))
            self._lookups[model] = lookup
            lookup.add_done_callback(lambda _: self._lookups.pop(model, None))
        return await asyncio.shield(lookup)

    async def _look_up(self, model: str) -> Route:
        try:
            async with asyncio.timeout(LOOKUP_TIMEOUT_S):
                workers = await list_workers(self._redis, model)
        except (RedisError, OSError) as exc:  # OSError covers the lookup's own TimeoutError
            self._throttle.log(logging.WARNING, "redis", "routing %s from its last known route: Redis: %s",
                               model, exc)
            return self._last_known(model)
        route = choose(model, workers)
        self._routes[model] = (route, time.monotonic())
        return route

    def _last_known(self, model: str) -> Route:
        cached = self._routes.get(model)
        known = cached[0] if cached is not None else choose(model, [])
        return replace(known, stale=True)
