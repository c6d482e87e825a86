"""The caches in a worker's batch path: between sorting a batch and tokenising it.

Order per version group: identical inputs inside the batch collapse onto one row
(followers get its answer); the exact cache answers repeats (in-process, then Redis); the
semantic cache, where the model has one, answers near repeats that pass its guards. What
the model computes afterwards fills both caches. A sampled share of semantic hits is
computed anyway: the model's answer is what the caller gets, and the comparison feeds the
cache's false-hit budget.
"""

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaProducer

from common.process import BACKGROUND_STOP_S, cancel_within
from common.redis_cluster import AnyRedis
from schemas.names import cache_generation_key
from schemas.wire import CacheTier, Result, now_ms
from models.backends.tokenized import TokenizedBackend
from models.tasks import task_named
from workers.cache.exact import ExactCache, unpack_outputs
from workers.cache.keys import input_digest
from workers.cache.metrics import CacheMetrics
from workers.delivery.sink import Outcome
from workers.settings import WorkerSettings
from workers.compute.compute import Computed
from workers.compute.prepare import Prepared, VersionGroup, drop_rows, timings_of
from workers.compute.triage import Ready

if TYPE_CHECKING:
    from workers.cache.semantic_tier import SemanticTier

log = logging.getLogger(__name__)


def digest_of(item: Ready) -> str:
    return input_digest(item.key or item.text, item.request.params)


def cached_result(group: VersionGroup, request_id: str, outputs: dict[str, Any], tier: CacheTier,
                  timings: dict[str, float], similarity: float | None = None) -> Result:
    return group.who.result(request_id, group.who.served_status, outputs=outputs, cache=tier, similarity=similarity,
                            timings=timings)


class BatchCaches:
    def __init__(self, settings: WorkerSettings, *, redis: AnyRedis, producer: AIOKafkaProducer, metrics: CacheMetrics,
                 load_encoder: Callable[[], TokenizedBackend], task: str) -> None:
        """`task`: what the served model does; only a task that says a near answer is right (a
        classifier's label) gets a semantic cache."""
        self._model = settings.model
        self._metrics = metrics
        self._redis = redis
        self._refresh_s = settings.cache_refresh_s
        self.exact = ExactCache(settings.model, redis=redis, local_max_bytes=int(settings.exact_cache_local_mb * 2**20),
                                redis_ttl_s=settings.exact_cache_ttl_s, redis_enabled=settings.exact_cache_redis,
                                metrics=metrics) if settings.exact_cache else None
        self.semantic: SemanticTier | None = None
        if settings.semantic_cache and not task_named(task).semantic_cache:
            log.warning("semantic cache refused for %s: a %s model's near answer is a wrong answer",
                        settings.model, "n embedding" if task == "embedding" else f" {task}")
        elif settings.semantic_cache:
            from workers.cache.semantic_tier import SemanticTier  # faiss loads only where a semantic cache is on

            self.semantic = SemanticTier(settings, producer=producer, metrics=metrics, load_encoder=load_encoder,
                                         redis=redis)
        self._refreshing: asyncio.Task[None] | None = None

    @property
    def digest(self) -> Callable[[Ready], str] | None:
        return digest_of if self.exact is not None else None

    async def start(self) -> None:
        # Read the generation before the first lookup, or a worker started right after a
        # `fleet cache clear` would serve the cleared entries until its first refresh.
        if self.exact is not None:
            await self.exact.refresh_generation()
        if self.semantic is not None:
            await self.semantic.set_generation(await self._generation())
        self._refreshing = asyncio.create_task(self._follow_clears())

    async def stop(self) -> None:
        if self._refreshing is not None:
            await cancel_within([self._refreshing], BACKGROUND_STOP_S)
            self._refreshing = None
        if self.semantic is not None:
            await self.semantic.stop()

    async def lookup(self, prepared: Prepared) -> None:
        """Answer what the caches can; what is left in the groups goes to the model. A cache that
        fails answers nothing (the model computes), and the failure is logged, never raised."""
        if self.exact is not None:
            for group in prepared.groups:
                self._collapse_identical(group)
                await self._exact_lookup(group, prepared)
        if self.semantic is not None:
            try:
                await self.semantic.lookup(prepared)
            except Exception:
                log.exception("semantic cache lookup failed; the model computes this batch")

    async def remember(self, computed: Computed) -> None:
        """Teach the caches what the model just computed (never raises into the worker)."""
        try:
            if self.exact is not None:
                by_version: dict[str, list[tuple[str, bytes]]] = {}
                for fresh in computed.fresh:
                    if fresh.group.digests:
                        by_version.setdefault(fresh.group.who.version, []).append((fresh.group.digests[fresh.row],
                                                                                   fresh.packed_outputs))
                for version, items in by_version.items():
                    await self.exact.put_many(version, items)
            if self.semantic is not None:
                await self.semantic.remember(computed)
        except Exception:
            log.exception("filling the caches after a batch failed; results were delivered regardless")

    def _collapse_identical(self, group: VersionGroup) -> None:
        """Identical inputs in one batch are computed (or looked up) once; the repeats follow the first."""
        first_row: dict[str, int] = {}
        kept: list[int] = []
        repeats: list[tuple[str, Ready]] = []
        for row, (digest, item) in enumerate(zip(group.digests, group.ready, strict=True)):
            if digest in first_row:
                repeats.append((digest, item))
            else:
                first_row[digest] = len(kept)
                kept.append(row)
        if not repeats:
            return
        group.followers += [(first_row[digest], item) for digest, item in repeats]
        group.ready[:] = [group.ready[row] for row in kept]
        group.digests[:] = [group.digests[row] for row in kept]
        self._metrics.dedupe.labels(model=self._model).inc(len(repeats))

    async def _exact_lookup(self, group: VersionGroup, prepared: Prepared) -> None:
        assert self.exact is not None
        if not group.ready:
            return
        started = time.perf_counter()
        cached = await self.exact.get_many(group.who.version, group.digests)
        hits = {row: unpack_outputs(hit.outputs) for row, hit in enumerate(cached) if hit is not None}
        cache_ms, finished_ms = (time.perf_counter() - started) * 1000, now_ms()
        drop_rows(group, hits, lambda row, item: Outcome.of(item, cached_result(
            group, item.request.id, hits[row], CacheTier.exact,
            timings_of(prepared, item, finished_ms, cache_ms=cache_ms))), prepared.triaged.answered)

    async def _generation(self) -> int:
        """The model's cache generation: the exact cache's (it follows Redis and was just refreshed),
        else read here."""
        if self.exact is not None and self.exact.redis_enabled:
            return self.exact.generation
        raw = await self._redis.get(cache_generation_key(self._model))
        return int(raw) if raw else 0

    async def _follow_clears(self) -> None:
        while True:
            await asyncio.sleep(self._refresh_s)
            try:
                changed = self.exact is not None and await self.exact.refresh_generation()
                if self.semantic is not None:
                    changed = await self.semantic.set_generation(await self._generation()) or changed
                if changed:
                    log.warning("cache of %s cleared by an operator: in-process tiers dropped", self._model)
            except Exception as exc:
                log.warning("cannot check for cache clears (%s); retrying", exc)
