"""Comparing one batch of requests the shadow way, shared by the shadow worker and the replay.

For a batch of request records: decode, sample, run the candidate version, and in the
meantime look the live results up in Redis (waiting up to a grace period, counted from
each record's Kafka timestamp, for answers the live workers have not written yet); the
shadow computes stable itself for requests still without a usable live answer. Then it
publishes one Comparison per request and adds the batch's figures to the stats hash.

A shadow never delivers: it writes no result keys, reply streams or results topics, only
`fleet.shadow.<model>`, the stats hash and its own metrics. Deadlines are ignored, so a
replay of old traffic is compared like fresh traffic.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaProducer, ConsumerRecord
from prometheus_client import CollectorRegistry, Counter as PromCounter, Gauge, Histogram

from common.redis_cluster import AnyRedis, mget_all

from schemas.names import comparisons_topic, result_key, shadow_stats_key
from versions.pointers import read_pointers
from schemas.shadow import Comparison, LiveSource
from schemas.wire import Request, Result, WireError
from models.backends.base import Backend
from workers.compute.outputs import outputs_of
from models.loading import ModelLoader
from models.registry import ModelManifest, ModelRegistry, RegistryError
from models.tasks import Parsed, task_of
from workers.runtime_settings import ModelRuntimeSettings
from workers.shadow.settings import ShadowSettings
from workers.shadow.compare import (Outputs, Side, StatsDelta, live_answer, live_timing, make_comparison,
                                    queue_increments, sampled)

log = logging.getLogger(__name__)

# Loads one named version of the shadowed model (its own precision), e.g. ModelLoader.load_version.
BackendLoader = Callable[[str], Backend]
LIVE_POLL_S = 0.1
COSINE_BUCKETS = (0.5, 0.8, 0.9, 0.95, 0.97, 0.98, 0.99, 0.995, 0.999, 0.9999, 1.0)
DELTA_MS_BUCKETS = (-500, -200, -100, -50, -20, -10, -5, -2, 0, 2, 5, 10, 20, 50, 100, 200, 500)


def yield_cpu_to_live_workers(settings: ShadowSettings) -> None:
    """For a shadow process's entry point: on a shared host the live path keeps the CPU it needs."""
    if settings.shadow_nice > 0:
        os.nice(settings.shadow_nice)


class BackendCache:
    """Loaded versions by id: stable stays resident for recomputing, a new candidate is loaded once."""

    def __init__(self, settings: ModelRuntimeSettings, loader: BackendLoader | None = None) -> None:
        self._loader = loader or ModelLoader(settings.runtime()).load_version
        self._loaded: dict[str, Backend] = {}

    async def get(self, version: str) -> Backend:
        if version not in self._loaded:
            started = time.perf_counter()
            self._loaded[version] = await asyncio.to_thread(self._loader, version)
            log.info("shadow loaded %s in %.1f s", version, time.perf_counter() - started)
        return self._loaded[version]

    def retain(self, versions: set[str]) -> None:
        """Drop versions no pointer names any more, so a rollout's old candidates free their memory."""
        for version in set(self._loaded) - versions:
            del self._loaded[version]

    @property
    def resident(self) -> frozenset[str]:
        return frozenset(self._loaded)


class ShadowMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        labels = ["model", "candidate"]
        reg = self.registry
        self.compared = PromCounter("fleet_shadow_compared", "Requests compared by shadow workers", labels,
                                    registry=reg)
        self.agreement = Gauge("fleet_shadow_agreement", "Share of compared requests that agreed, fleet-wide "
                               "(from the stats hash)", labels, registry=reg)
        self.cosine = Histogram("fleet_shadow_cosine", "Cosine of live and candidate embeddings", labels,
                                buckets=COSINE_BUCKETS, registry=reg)
        self.latency_delta = Histogram("fleet_shadow_latency_delta_ms", "Candidate minus live inference ms of "
                                       "the batch each request was in", labels, buckets=DELTA_MS_BUCKETS,
                                       registry=reg)
        self.skipped = PromCounter("fleet_shadow_skipped", "Requests the shadow did not compare, by reason",
                                   ["model", "reason"], registry=reg)


@dataclass
class _Item:
    record: ConsumerRecord
    request: Request
    text: str
    payload: Any = None  # what the backend encodes (models/tasks: the task's parsed input)


@dataclass
class ShadowTotals:
    """What one engine compared and skipped since it started."""

    records: int = 0
    compared: int = 0
    agreed: int = 0
    skipped: Counter[str] = field(default_factory=Counter)


def _outputs_of(backend: Backend, rows: Any) -> list[Outputs]:
    # The same mapping the live worker applies: an embedding row is the embedding, a
    # classifier's row becomes {"label", "score", "top"} by its manifest's labels.
    return [outputs_of(backend.manifest, row) for row in rows]


def _run(backend: Backend, payloads: Sequence[Any]) -> tuple[list[Outputs], float]:
    started = time.perf_counter()
    rows = backend.infer(list(payloads))
    elapsed_ms = (time.perf_counter() - started) * 1000
    return _outputs_of(backend, rows), elapsed_ms


class ShadowEngine:
    def __init__(self, settings: ShadowSettings, redis: AnyRedis, producer: AIOKafkaProducer, backends: BackendCache,
                 metrics: ShadowMetrics) -> None:
        self.settings = settings
        self.model = settings.model
        self.topic = comparisons_topic(settings.model)
        self.metrics = metrics
        self.totals = ShadowTotals()
        self.stable: str | None = None
        self.candidate: str | None = None
        self._redis = redis
        self._producer = producer
        self._backends = backends
        self._pointers_read_at = -float("inf")

    async def refresh_versions(self, *, force: bool = False) -> None:
        """Re-read stable and candidate from the pointer hash, at most every shadow_pointer_poll_s."""
        if not force and time.monotonic() - self._pointers_read_at < self.settings.shadow_pointer_poll_s:
            return
        self._pointers_read_at = time.monotonic()
        pointers = await read_pointers(self._redis, self.model)
        stable = pointers.stable or self._registered_stable()
        candidate = self.settings.shadow_candidate or pointers.candidate
        if (stable, candidate) != (self.stable, self.candidate):
            log.info("shadow of %s: stable %s, candidate %s", self.model, stable, candidate or "none (idle)")
            self.stable, self.candidate = stable, candidate
            self._backends.retain({v for v in (stable, candidate) if v})

    async def _candidate_manifest(self) -> ModelManifest | None:
        """The candidate's manifest (its task reads the requests); None without a loadable candidate."""
        if self.candidate is None or self.candidate == self.stable:
            return None
        try:
            return (await self._backends.get(self.candidate)).manifest
        except Exception as exc:  # counted where the candidate runs; here the requests are read as texts
            log.warning("cannot load candidate %s to read its task (%s)", self.candidate, exc)
            return None

    def _registered_stable(self) -> str | None:
        """Without a stable pointer, stable is what a live worker with these settings would load."""
        try:
            return ModelRegistry(self.settings.registry_dir).resolve(self.model, self.settings.model_version,
                                                                       self.settings.precision).id
        except (RegistryError, ValueError):
            return None

    def _skip(self, reason: str, count: int = 1) -> None:
        if count:
            self.totals.skipped[reason] += count
            self.metrics.skipped.labels(model=self.model, reason=reason).inc(count)

    def _triage(self, records: Sequence[ConsumerRecord], manifest: ModelManifest | None) -> list[_Item]:
        """`manifest`: the candidate's, whose task reads the inputs (None: no candidate, read as texts)."""
        items = []
        for record in records:
            try:
                request = Request.decode(record.value or b"")
                if manifest is None:
                    parsed = Parsed(request.text, request.text, request.text)
                else:
                    parsed = task_of(manifest).parse(request, manifest, max_chars=16 * self.settings.max_input_tokens)
            except WireError:
                self._skip("undecodable")  # the live path dead-letters it; nothing to compare
                continue
            if sampled(request.id, self.settings.shadow_sample):
                items.append(_Item(record, request, parsed.text, parsed.payload))
            else:
                self._skip("not_sampled")
        return items

    async def process(self, records: Sequence[ConsumerRecord]) -> list[Comparison]:
        """Compare one batch; never raises for bad input or a failing candidate (those are counted)."""
        self.totals.records += len(records)
        await self.refresh_versions()
        items = self._triage(records, await self._candidate_manifest())
        if not items:
            return []
        candidate, stable = self.candidate, self.stable
        if candidate is None or candidate == stable:
            self._skip("no_candidate", len(items))
            return []
        delta = StatsDelta()
        manifest = await self._candidate_manifest()
        task = manifest.task if manifest is not None else None
        # The candidate runs while the live results are looked up (and waited for).
        running = asyncio.create_task(self._run_candidate(candidate, items))
        try:
            live = await self._live_results(items)  # a Redis failure propagates: nothing is committed
        except BaseException:
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
            raise
        try:
            shadow_outputs, shadow_ms = await running
        except Exception:
            log.exception("candidate %s failed on a batch of %d; counted as errors", candidate, len(items))
            self._skip("candidate_failed", len(items))
            delta.errors = len(items)
            await self._write_stats(candidate, delta)
            return []
        stable_sides = await self._recompute(stable, candidate, items, live)
        comparisons: list[Comparison] = []
        for item, outputs in zip(items, shadow_outputs, strict=True):
            shadow = Side(candidate, outputs, shadow_ms, len(items))
            answer = live_answer(live.get(item.request.id), candidate)
            if answer is not None:
                ms, batch = live_timing(answer)
                side, source = Side(answer.version or "", answer.outputs or {}, ms, batch), LiveSource.live_result
            elif item.request.id in stable_sides:
                side, source = stable_sides[item.request.id], LiveSource.recomputed
            else:
                self._skip("no_stable")
                continue
            try:
                comparisons.append(make_comparison(item.request, item.text, side, shadow, source,
                                                   agree_cosine=self.settings.shadow_agree_cosine, task=task))
            except ValueError as exc:
                log.warning("request %s: %s", item.request.id, exc)
                self._skip("incomparable")
        for comparison in comparisons:
            delta.add(comparison)
        await asyncio.gather(self._publish(comparisons), self._write_stats(candidate, delta))
        self._observe(candidate, comparisons)
        return comparisons

    async def _run_candidate(self, candidate: str, items: list[_Item]) -> tuple[list[Outputs], float]:
        backend = await self._backends.get(candidate)
        return await asyncio.to_thread(_run, backend, [item.payload for item in items])

    async def _live_results(self, items: list[_Item]) -> dict[str, Result]:
        """Live results by request id; waits for missing ones until each record's timestamp + grace.

        Any result found is final (an error or expired answer will not turn into another), so
        only absent ones are polled for again.
        """
        found: dict[str, Result] = {}
        waiting = list(items)
        while True:
            values = await mget_all(self._redis, [result_key(item.request.id) for item in waiting])
            still: list[_Item] = []
            for item, value in zip(waiting, values, strict=True):
                result = _decode_result(value)
                if result is None:
                    still.append(item)
                else:
                    found[item.request.id] = result
            waiting = still
            give_up_s = (max((item.record.timestamp for item in waiting), default=0) + self.settings.shadow_grace_ms) / 1000
            left_s = give_up_s - time.time()
            if not waiting or left_s <= 0:
                return found
            await asyncio.sleep(min(LIVE_POLL_S, left_s))

    async def _recompute(self, stable: str | None, candidate: str, items: list[_Item],
                         live: dict[str, Result]) -> dict[str, Side]:
        """Stable's answers, computed here, for requests without a usable live answer."""
        missing = [item for item in items if live_answer(live.get(item.request.id), candidate) is None]
        if not missing or stable is None:
            return {}
        try:
            backend = await self._backends.get(stable)
            outputs, ms = await asyncio.to_thread(_run, backend, [item.payload for item in missing])
        except Exception:
            log.exception("recomputing stable %s for %d requests failed", stable, len(missing))
            return {}
        return {item.request.id: Side(stable, out, ms, len(missing)) for item, out in zip(missing, outputs, strict=True)}

    async def _publish(self, comparisons: list[Comparison]) -> None:
        sends = [await self._producer.send(self.topic, c.encode(), key=c.id.encode()) for c in comparisons]
        await asyncio.gather(*sends)

    async def _write_stats(self, candidate: str, delta: StatsDelta) -> None:
        key = shadow_stats_key(self.model, candidate)
        pipe = self._redis.pipeline(transaction=False)
        if not queue_increments(pipe, key, delta):
            return
        pipe.hmget(key, ["compared", "agreed"])
        compared, agreed = (await pipe.execute())[-1]
        if compared:
            self.metrics.agreement.labels(model=self.model, candidate=candidate).set(int(agreed or 0) / int(compared))

    def _observe(self, candidate: str, comparisons: list[Comparison]) -> None:
        labels = dict(model=self.model, candidate=candidate)
        self.metrics.compared.labels(**labels).inc(len(comparisons))
        self.totals.compared += len(comparisons)
        self.totals.agreed += sum(c.agreed for c in comparisons)
        for c in comparisons:
            if c.cosine is not None:
                self.metrics.cosine.labels(**labels).observe(c.cosine)
            if c.live_ms is not None:
                self.metrics.latency_delta.labels(**labels).observe(c.shadow_ms - c.live_ms)


def _decode_result(value: bytes | None) -> Result | None:
    if value is None:
        return None
    try:
        return Result.decode(value)
    except WireError:
        return None
