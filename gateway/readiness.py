"""What /readyz answers: whether Kafka and Redis answer, asked at most once a second; and
`ModelReadiness`: whether a live worker serves a model, for the Open Inference Protocol's ready routes.

/readyz is open to everyone (an orchestrator's probe carries no key). Asked on every call, a burst
of probes pinged Redis and fetched Kafka's metadata once each, all at once: 300 of them took the
connection pool that key lookups and replies use, so the gateway reported itself down and turned
real tenants away while Redis was fine. Here one check runs at a time, every caller meanwhile gets
its answer, and the answer serves for `fresh_s` after it, so probes cost Kafka and Redis nothing
more however many arrive.
"""

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from common.heartbeats import WorkerInfo, list_workers
from common.redis_cluster import AnyRedis, text_of
from gateway.shared_fetch import SharedFetch
from schemas.names import versions_key

Check = Callable[[], Awaitable[Any]]
MAX_MODELS = 10_000  # stable pointers read at once


class Readiness:
    def __init__(self, checks: dict[str, Check], *, timeout_s: float, fresh_s: float = 1.0) -> None:
        """`checks`: name -> a call that raises (or hangs past `timeout_s`) when that dependency is down."""
        self._checks = checks
        self._timeout_s = timeout_s
        self._fresh_s = fresh_s
        self._answers_of_all: SharedFetch[dict[str, bool]] = SharedFetch(self._ask)

    async def checks(self) -> dict[str, bool]:
        """Each dependency's answer, at most `fresh_s` old."""
        shared = self._answers_of_all
        if shared.value is not None and shared.age_s() < self._fresh_s:
            return dict(shared.value)
        return dict(await shared.refresh())

    async def _ask(self) -> dict[str, bool]:
        names = list(self._checks)
        answers = await asyncio.gather(*(self._answers(self._checks[name]) for name in names))
        return dict(zip(names, answers, strict=True))

    async def _answers(self, check: Check) -> bool:
        try:
            async with asyncio.timeout(self._timeout_s):
                await check()
            return True
        except Exception:
            return False


@dataclass(frozen=True)
class Served:
    """Whether a model is ready, as the Open Inference Protocol's clients mean it, and why not."""

    ready: bool
    reason: str = ""


@dataclass(frozen=True)
class Serving:
    """What the readiness answers are read from: the live workers, and the stable version of each model."""

    workers: list[WorkerInfo]
    stable: dict[str, str | None]


class ModelReadiness:
    """Whether a live worker serves a model's stable version (or a pinned version) now.

    The heartbeats and the stable pointers of every model served are read at most once per `fresh_s`
    (workers: one index walk; pointers: one pipeline of HGETs, one command per key on a cluster), one
    read shared by every caller meanwhile: the server's readiness route is open to everyone, and a
    burst of probes must cost Redis no more than one."""

    def __init__(self, redis: Callable[[], AnyRedis], models: Callable[[], frozenset[str]], *,
                 fresh_s: float = 1.0) -> None:
        self._redis = redis
        self._models = models
        self._fresh_s = fresh_s
        self._serving: SharedFetch[Serving] = SharedFetch(self._read)

    async def of(self, model: str, version: str | None = None) -> Served:
        """Raises what Redis raises when it does not answer."""
        serving = await self._now()
        if version is None and model not in serving.stable:
            serving = await self._serving.refresh()  # a model this gateway began to serve a moment ago
        workers = [w for w in serving.workers if w.model == model and w.answering]
        wanted = version if version is not None else serving.stable.get(model)
        if wanted is not None:
            if any(w.version == wanted for w in workers):
                return Served(True)
            return Served(False, f"no live worker serves version {wanted[:80]} of {model[:80]}" + (
                f" (they serve {', '.join(sorted({w.version for w in workers}))})" if workers else ""))
        if workers:
            return Served(True)
        return Served(False, f"no live worker serves {model[:80]}")

    async def all_of(self, models: frozenset[str]) -> Served:
        """Ready when every one of `models` is: the first that is not says why."""
        for model in sorted(models):
            served = await self.of(model)
            if not served.ready:
                return served
        return Served(True)

    async def _now(self) -> Serving:
        shared = self._serving
        if shared.value is not None and shared.age_s() < self._fresh_s:
            return shared.value
        return await shared.refresh()

    async def _read(self) -> Serving:
        redis = self._redis()
        workers = await list_workers(redis)
        models = sorted(self._models())[:MAX_MODELS]
        async with redis.pipeline(transaction=False) as pipe:
            for model in models:
                pipe.hget(versions_key(model), "stable")
            stables = await pipe.execute()
        return Serving(workers, {model: text_of(raw) if raw else None
                                 for model, raw in zip(models, stables, strict=True)})
